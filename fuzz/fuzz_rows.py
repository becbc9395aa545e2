"""Fuzz target: the compiled row work (``importer.core._rows``) against the pure modules.

    IMPORTER_SANITIZE=address python setup.py build_ext --inplace   # optional, for ASan
    python fuzz/fuzz_rows.py [atheris/libFuzzer options]

The input is split into strings: the first byte picks the international flag and the row
builder's value limit, the rest is decoded (UTF-8, replacing) and cut at ``\\x00`` into fields.
Each field goes through the three normalizers, compiled and pure; the fields also make a
record for a builder of a fixed plan (key, name, address, phone, whatsapp, e-mail, journey,
two custom fields). Any difference raises.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from importer.core import _rows as compiled
    from importer.core import normalize, rows
    from importer.core.layout import Column, RowPlan, Target
    from importer.core.models import Attribute, Channel

_TARGETS = (
    Target(attribute=Attribute.CPF_CNPJ),
    Target(attribute=Attribute.NAME),
    Target(attribute=Attribute.STREET_ADDRESS),
    Target(channel=Channel.PHONE),
    Target(channel=Channel.WHATSAPP),
    Target(channel=Channel.EMAIL),
    Target(channel=Channel.JOURNEY),
    Target(custom="Plano"),
    Target(custom="Origem"),
)
_PLAN = RowPlan(tuple(Column(i, f"c{i}", t) for i, t in enumerate(_TARGETS)), None)
_LIMITS = (0, 3, 16, 4096)


def _same(what: str, value: str, got: object, expected: object) -> None:
    if got != expected or type(got) is not type(expected):
        raise AssertionError(f"{what}({value!r}): compiled {got!r} != pure {expected!r}")


def TestOneInput(data: bytes) -> None:  # noqa: N802 - the name atheris calls
    if not data:
        return
    flags, text = data[0], data[1:].decode("utf-8", "replace")
    international = bool(flags & 1)
    limit = _LIMITS[(flags >> 1) % len(_LIMITS)]
    fields = text.split("\x00")
    for value in fields:
        _same("key", value, compiled.normalize_cpf_cnpj(value), normalize.normalize_cpf_cnpj(value))
        _same(
            "phone",
            value,
            compiled.normalize_phone_parts(value, international=international),
            normalize.normalize_phone_parts(value, international=international),
        )
        _same("email", value, compiled.normalize_email(value), normalize.normalize_email(value))
    pure = rows.RowBuilder(_PLAN, international=international, max_value_chars=limit)
    fast = compiled.FastRowBuilder(_PLAN, international=international, max_value_chars=limit)
    got, expected = fast.build(1, fields), pure.build(1, fields)
    if got != expected:
        raise AssertionError(f"build({fields!r}): compiled {got!r} != pure {expected!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

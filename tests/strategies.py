"""Hypothesis strategies for contact files whose expected outcome is known row by row."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from hypothesis import strategies as st

from importer.core.models import Channel, ContactRow, Detail
from tests.support import bad_cpf, cpf

HEADER = ["nome", "cpf", "email", "celular", "plano", "cidade"]
KEYS = [cpf(i) for i in range(1, 13)]
PHONES = {
    "": None,
    "(11) 91234-5678": "+5511912345678",
    "21 99876-5432": "+5521998765432",
    "123": None,
}
EMAILS = {"": None, "a@x.com.br": "a@x.com.br", "B@X.COM.BR": "B@x.com.br", "bad-email": None}


@dataclass(frozen=True)
class GeneratedRow:
    cells: tuple[str, ...]
    expected: ContactRow | None  # None: the row is invalid

    def with_line(self, line: int) -> ContactRow | None:
        if self.expected is None:
            return None
        e = self.expected
        return ContactRow(line, e.cpf_cnpj, e.name, e.street_address, e.details, e.custom_fields)


def _formatted(key: str, style: int) -> str:
    if style == 1:
        return f"{key[:3]}.{key[3:6]}.{key[6:9]}-{key[9:]}"
    if style == 2:
        return key.lstrip("0") or "0"
    return key


@st.composite
def rows(draw: st.DrawFn, key_count: int = len(KEYS)) -> GeneratedRow:
    """A row of one of the first ``key_count`` keys (few keys: many rows meet on one)."""
    key_kind = draw(st.sampled_from(["valid"] * 8 + ["bad", "missing"]))
    index = draw(st.integers(0, key_count - 1))
    name = draw(st.sampled_from(["", "Ana", "Bia", "  Caio  ", 'João, "Jr"']))
    email = draw(st.sampled_from(sorted(EMAILS)))
    phone = draw(st.sampled_from(sorted(PHONES)))
    plan = draw(st.sampled_from(["", "p1", "p2"]))
    city = draw(st.sampled_from(["", "São Paulo", "Recife"]))
    if key_kind == "valid":
        key_cell = _formatted(KEYS[index], draw(st.integers(0, 2)))
    elif key_kind == "bad":
        key_cell = bad_cpf(index + 1)
    else:
        key_cell = ""
        name = name or "Zed"  # an all-empty record is skipped, not counted: keep one value
    cells = (name, key_cell, email, phone, plan, city)
    if key_kind != "valid":
        return GeneratedRow(cells, None)
    details = []
    if EMAILS[email]:
        details.append(Detail(Channel.EMAIL, EMAILS[email]))
    if PHONES[phone]:
        details.append(Detail(Channel.PHONE, PHONES[phone]))
    custom = tuple((f, v) for f, v in (("plano", plan), ("cidade", city)) if v)
    expected = ContactRow(0, KEYS[index], name.strip() or None, None, tuple(details), custom)
    return GeneratedRow(cells, expected)


def csv_bytes(generated: list[GeneratedRow]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(HEADER)
    for row in generated:
        writer.writerow(row.cells)
    return out.getvalue().encode("utf-8")


def expected_rows(generated: list[GeneratedRow]) -> tuple[list[ContactRow], int]:
    """Valid rows in file order and the count of invalid ones (lines: header is 1)."""
    valid = [r.with_line(i + 2) for i, r in enumerate(generated)]
    return [r for r in valid if r is not None], sum(1 for r in valid if r is None)


_RULES = ["last_non_empty", "first_non_empty", "keep_existing", "fill_empty"]


@st.composite
def merge_documents(draw: st.DrawFn) -> dict[str, str]:
    """A layout's ``merge`` object over the generated rows' fields (custom names in any case),
    each entry present or not: every rule meets every field, and ``custom:*`` the rest."""
    candidates = {
        "name": st.sampled_from(_RULES),
        draw(st.sampled_from(["custom:plano", "custom:Plano"])): st.sampled_from(_RULES),
        "custom:CIDADE": st.sampled_from(_RULES),
        "custom:*": st.sampled_from(_RULES),
        "channels": st.sampled_from(["union", "replace"]),
    }
    return {key: draw(rule) for key, rule in candidates.items() if draw(st.booleans())}


# A file keyed by e-mail (layout {"key": "email"}, core.keys): no CPF column; the key pool meets
# the e-mails of rows() so that preloaded contacts share them (ambiguous keys) or hold several.
EMAIL_HEADER = ["nome", "email", "celular", "plano", "cidade"]
EMAIL_KEYS = {
    "a@x.com.br": "a@x.com.br",
    "B@X.COM.BR": "B@x.com.br",
    "c@y.com.br": "c@y.com.br",
    "d@y.com.br": "d@y.com.br",
    "": None,
    "bad-email": None,
}
EMAIL_LAYOUT: dict[str, object] = {"key": "email"}


@st.composite
def email_rows(draw: st.DrawFn) -> GeneratedRow:
    """A row of an e-mail-keyed file: its key is its (normalized) e-mail; none or a bad one makes
    it invalid (``missing_key``, ``invalid_email``)."""
    name = draw(st.sampled_from(["", "Ana", "Bia", "  Caio  ", 'João, "Jr"']))
    email = draw(st.sampled_from(sorted(EMAIL_KEYS)))
    phone = draw(st.sampled_from(sorted(PHONES)))
    plan = draw(st.sampled_from(["", "p1", "p2"]))
    city = draw(st.sampled_from(["", "São Paulo", "Recife"]))
    if not email:
        name = name or "Zed"  # an all-empty record is skipped, not counted: keep one value
    cells = (name, email, phone, plan, city)
    key = EMAIL_KEYS[email]
    if key is None:
        return GeneratedRow(cells, None)
    details = [Detail(Channel.EMAIL, key)]
    if PHONES[phone]:
        details.append(Detail(Channel.PHONE, PHONES[phone]))
    custom = tuple((f, v) for f, v in (("plano", plan), ("cidade", city)) if v)
    expected = ContactRow(0, key, name.strip() or None, None, tuple(details), custom)
    return GeneratedRow(cells, expected)


def email_csv_bytes(generated: list[GeneratedRow]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(EMAIL_HEADER)
    for row in generated:
        writer.writerow(row.cells)
    return out.getvalue().encode("utf-8")


@st.composite
def keyed_merge_documents(draw: st.DrawFn) -> dict[str, str]:
    """:func:`merge_documents` without ``replace`` (refused with a channel key)."""
    document = draw(merge_documents())
    document.pop("channels", None)
    return document

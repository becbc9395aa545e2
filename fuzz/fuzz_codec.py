"""Fuzz target: chunk-message decoding, compiled (``importer/core/_codec.pyx``) against pure.

    IMPORTER_SANITIZE=address python setup.py build_ext --inplace
    python fuzz/fuzz_codec.py [corpus dir] [-atheris_runs=N]

Each input is decoded by both codecs; they must give the same message (and custom field
names) or both MalformedMessageError — any other exception, or a difference, is a finding.
Inputs starting with 0x00 are spliced into a valid version 2 message instead (the rest of the
input replaces a slice of it), so that mutations reach past the JSON parser into the tables.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports():
    from importer.core import codec
    from importer.core.errors import MalformedMessageError
    from importer.core.models import (
        Batch,
        Channel,
        ContactRow,
        Detail,
        Limits,
        Reason,
        RowIssue,
        Severity,
    )

PURE = codec.PURE
COMPILED = codec.implementation(compiled=True)
LIMITS = Limits(max_field_chars=40)
_ROW = ContactRow(
    10,
    "52998224725",
    "Ana",
    None,
    (Detail(Channel.EMAIL, "ana@x.br"), Detail(Channel.PHONE, "+5511987654321", 55, "BR")),
    (("plano", "Gold"), ("cidade", "Recife")),
)
_ISSUE = RowIssue(11, "cpf", Reason.INVALID_CPF, "123", Severity.INVALID)
VALID = PURE.encode(
    uuid.UUID(int=7), "w1", Batch(3, 1, 10, 99, (_ROW, _ROW), (_ISSUE,), invalid=1, end_line=12)
)


def _outcome(decode: object, body: bytes) -> object:
    try:
        message = decode(body, LIMITS)  # type: ignore[operator]
    except MalformedMessageError:
        return "malformed"
    return message, message.field_names()


def TestOneInput(data: bytes) -> None:  # noqa: N802 - atheris' name
    body = data
    if data[:1] == b"\x00" and len(data) >= 3:
        start = data[1] * len(VALID) // 256
        end = start + data[2] % 16
        body = VALID[:start] + data[3:] + VALID[end:]
    pure = _outcome(PURE.decode, body)
    compiled = _outcome(COMPILED.decode, body)
    if pure != compiled:
        raise AssertionError(f"pure {pure!r} != compiled {compiled!r} for {body!r}")


if __name__ == "__main__":
    if not COMPILED.compiled:
        sys.exit("importer.core._codec is not built: python setup.py build_ext --inplace")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

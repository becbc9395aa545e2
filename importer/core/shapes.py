"""What a column's values look like: CPFs or CNPJs, e-mails, Brazilian phone numbers.

Pure: the import's own normalizers (:mod:`importer.core.normalize`) decide, so a column is
suggested as e-mails exactly when the import would take its values as e-mails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from importer.core.headers import TargetKind
from importer.core.models import Reason
from importer.core.normalize import normalize_cpf_cnpj, normalize_email, normalize_phone

# The share of a column's non-empty sampled values that must fit a shape for it to be suggested.
MIN_SHARE = 0.6
# Fewer non-empty values than this say nothing about a column.
MIN_VALUES = 2


@dataclass(frozen=True, slots=True)
class ShapeMatch:
    kind: TargetKind
    share: float  # of the non-empty sampled values, 0..1
    values: int  # how many non-empty values were looked at


def _is_key(value: str) -> bool:
    return not isinstance(normalize_cpf_cnpj(value), Reason)  # a Reason is a str too


def _is_email(value: str) -> bool:
    return "@" in value and normalize_email(value) is not None


def _is_phone(value: str) -> bool:
    return normalize_phone(value) is not None


# In the order a tie is decided: a plain 11-digit number can be both a CPF and a mobile number.
_SHAPES: tuple[tuple[TargetKind, Callable[[str], bool]], ...] = (
    (TargetKind.CPF_CNPJ, _is_key),
    (TargetKind.EMAIL, _is_email),
    (TargetKind.PHONE, _is_phone),
)


def match_values(values: Sequence[str]) -> ShapeMatch | None:
    """The shape most of the non-empty values fit (at least :data:`MIN_SHARE`), or None."""
    present = [v.strip() for v in values if v.strip()]
    if len(present) < MIN_VALUES:
        return None
    best: ShapeMatch | None = None
    for kind, fits in _SHAPES:
        share = sum(1 for v in present if fits(v)) / len(present)
        if share >= MIN_SHARE and (best is None or share > best.share):
            best = ShapeMatch(kind, round(share, 3), len(present))
    return best

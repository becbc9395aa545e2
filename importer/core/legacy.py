"""What other writers left in the contact tables that breaks the importer's assumptions (pure):
the findings of ``importer db check``.

Three kinds: ``legacy_duplicate`` (live contacts of one client whose keys share a normal form:
the migration refuses to build ``contact_client_key_form_key`` over them), ``invalid_key`` (a
stored CPF/CNPJ that is not a valid one: the importer never matches a file's row to it) and
``unnormalized_channel`` (a phone, WhatsApp or e-mail stored in another form than the importer
writes: a file's value is not recognised as the same channel). docs/OPERATIONS.md says what the
owner does with each.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence

from importer.core.models import Channel, Reason
from importer.core.normalize import normalize_cpf_cnpj, normalize_email, normalize_phone
from importer.core.report import neutralize


class Finding(enum.StrEnum):
    LEGACY_DUPLICATE = "legacy_duplicate"
    INVALID_KEY = "invalid_key"
    UNNORMALIZED_CHANNEL = "unnormalized_channel"


@dataclasses.dataclass(frozen=True, slots=True)
class LegacyRow:
    """One finding: the contacts (and detail) it is about, as stored, and the importer's form."""

    kind: Finding
    client_id: int
    contact_ids: tuple[int, ...]
    stored: tuple[str, ...]
    normal_form: str | None  # None: none exists (the value is not valid)
    reason: str
    detail_id: int | None = None

    def document(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "client_id": self.client_id,
            "contact_ids": list(self.contact_ids),
            "detail_id": self.detail_id,
            "stored": list(self.stored),
            "normal_form": self.normal_form,
            "reason": self.reason,
        }

    def cells(self) -> tuple[str, ...]:
        """A CSV row, formula-safe (the values are other components' data)."""
        return (
            self.kind.value,
            str(self.client_id),
            " ".join(map(str, self.contact_ids)),
            "" if self.detail_id is None else str(self.detail_id),
            neutralize(" | ".join(self.stored)),
            neutralize(self.normal_form or ""),
            self.reason,
        )


CSV_HEADER = (
    "kind",
    "client_id",
    "contact_ids",
    "detail_id",
    "stored",
    "normal_form",
    "reason",
)


def duplicate(client_id: int, key_form: str, ids: Sequence[int], keys: Sequence[str]) -> LegacyRow:
    return LegacyRow(
        Finding.LEGACY_DUPLICATE,
        client_id,
        tuple(ids),
        tuple(keys),
        key_form,
        f"{len(ids)} live contacts share this key; the oldest is {min(ids)}",
    )


def key_finding(client_id: int, contact_id: int, stored: str) -> LegacyRow | None:
    """An ``invalid_key`` finding, or None for a key the importer matches (valid, any spelling)."""
    normal = normalize_cpf_cnpj(stored)
    if not isinstance(normal, Reason):
        return None
    return LegacyRow(Finding.INVALID_KEY, client_id, (contact_id,), (stored,), None, normal.value)


_E164 = re.compile(r"\+[1-9][0-9]{7,14}")


def channel_finding(
    client_id: int, contact_id: int, detail_id: int, channel: int, stored: str
) -> LegacyRow | None:
    """An ``unnormalized_channel`` finding, or None when ``stored`` is in the importer's form
    (journey values are the platform's own: never a finding)."""
    if channel in (Channel.PHONE, Channel.WHATSAPP):
        if _E164.fullmatch(stored):
            return None
        phone = normalize_phone(stored)
        normal = None if phone is None else phone.e164
    elif channel == Channel.EMAIL:
        normal = normalize_email(stored)
        if normal == stored:
            return None
    else:
        return None
    reason = "not in the importer's form" if normal else "not a valid value of its channel"
    return LegacyRow(
        Finding.UNNORMALIZED_CHANNEL,
        client_id,
        (contact_id,),
        (stored,),
        normal,
        f"{Channel(channel).name.lower()}: {reason}",
        detail_id,
    )

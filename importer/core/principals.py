"""Who calls: a verified principal (user, tenant) and the permissions a token may carry."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from importer.core.errors import PermissionDeniedError


class Permission(StrEnum):
    """Permissions the platform's tokens carry; values are the identity provider's strings."""

    CONTACT_IMPORT_CREATE = "CONTACT_IMPORT.CREATE"
    HSM_CREATE = "HSM.CREATE"
    IMPORT_ADMIN = "IMPORT.ADMIN"


@dataclass(frozen=True, slots=True)
class Principal:
    """The verified caller: every tenant-scoped query takes its ids from here."""

    user_id: str
    client_id: int
    permissions: frozenset[Permission]

    def require(self, permission: Permission) -> None:
        """Refuse (403) unless the token grants ``permission``; nothing is granted implicitly."""
        if permission not in self.permissions:
            raise PermissionDeniedError(f"the token does not grant {permission.value}")

"""Object keys and sealed objects: what the object stores may hold and how a seal is checked."""

from __future__ import annotations

from dataclasses import dataclass

from importer.core.errors import ChecksumMismatchError, InvalidObjectKeyError

# S3's limit on a key's UTF-8 length; the local store keeps the same rule, so a key that works
# on disk works on S3.
MAX_KEY_BYTES = 1024


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object as stored: its key, its size in bytes and the sha256 of its bytes (hex)."""

    key: str
    size: int
    sha256: str


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a safe object key, or None when it is.

    One rule for both stores: relative, '/'-separated segments, none of them empty, '.' or '..',
    no NUL, at most ``MAX_KEY_BYTES`` of UTF-8. So no key can leave the local store's directory,
    and a key accepted on disk is accepted by S3.
    """
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    problems = (
        (size == 0, "is empty"),
        (size > MAX_KEY_BYTES, f"is longer than {MAX_KEY_BYTES} bytes"),
        ("\x00" in key, "contains NUL"),
        (key.startswith("/"), "is absolute"),
        (any(s in ("", ".", "..") for s in key.split("/")), "has an empty, '.' or '..' segment"),
    )
    return next((why for found, why in problems if found), None)


def check_key(key: str) -> str:
    """``key`` itself when it is safe (see :func:`key_problem`); else InvalidObjectKeyError."""
    problem = key_problem(key)
    if problem is not None:
        raise InvalidObjectKeyError(f"object key {key[:80]!r} {problem}")
    return key


def check_sealed(found: StoredObject, size: int, sha256: str) -> None:
    """Raise ChecksumMismatchError unless the stored bytes are the sealed ones."""
    if found.size != size or found.sha256 != sha256.lower():
        raise ChecksumMismatchError(
            f"object {found.key!r} has {found.size} bytes, sha256 {found.sha256};"
            f" sealed: {size} bytes, sha256 {sha256}"
        )

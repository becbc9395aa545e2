"""Bearer tokens: who calls, for which tenant, allowed to do what.

Pure (PyJWT and cryptography, no web framework), so the HTTP API, the CLI's ``importer token``
and the tests share one verifier. Tenant and user come from a verified token only, never from a
request body: that is what keeps one client out of another's imports.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TypeGuard

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from cryptography.hazmat.primitives.serialization import (
    load_pem_private_key,
    load_pem_public_key,
)
from jwt.exceptions import InvalidSubjectError

from importer.core.errors import AuthenticationError, ConfigurationError
from importer.core.principals import Permission, Principal
from importer.settings import Settings

HS256 = "HS256"


RS256 = "RS256"


# Clock skew tolerated between the identity provider and this server on exp, nbf and iat:
# small enough that an expired token dies quickly, large enough for unsynchronized hosts.
LEEWAY_S = 30


# Real tokens are well under 1 KiB; the cap bounds the base64, JSON and crypto work a hostile
# caller can make us do, and matches the header limits of common proxies.
MAX_TOKEN_CHARS = 8 * 1024


# client_id columns are PostgreSQL ``integer``: a larger id fails here with 401, not as a
# database error deep inside a job.
MAX_CLIENT_ID = 2**31 - 1


# RFC 7518 §3.2: an HS256 key must be at least as long as the hash output (256 bits).
MIN_SECRET_BYTES = 32


# Below 2048 bits RSA signatures are forgeable with public resources (NIST SP 800-131A).
MIN_RSA_BITS = 2048


# A minted token's lifetime when none is asked for: a working session, not a standing credential.
DEFAULT_TTL_S = 3600


class TokenVerifier:
    """Verifies bearer tokens with exactly one pinned algorithm and key.

    One algorithm per server, never both: with HS256 and RS256 accepted together, a token signed
    with HMAC using the (public) RSA key as its secret would verify — the algorithm-confusion
    attack. The key is loaded and checked once, at start-up, so a bad key fails the deployment
    rather than every request.
    """

    __slots__ = ("_algorithm", "_audience", "_issuer", "_keys", "_required")

    def __init__(
        self,
        *,
        secret: str | None = None,
        public_key_pem: str | None = None,
        audience: str | None = None,
        issuer: str | None = None,
    ) -> None:
        """``public_key_pem`` may hold several PEM blocks (RS256 key rotation): a token verifies
        if any of them signed it. The algorithm stays pinned, so more keys add no confusion.
        With ``audience`` or ``issuer`` a token must carry that ``aud`` or ``iss`` (a token
        minted for another service of the same identity provider is refused)."""
        self._algorithm, self._keys = _verification_keys(secret, public_key_pem)
        self._audience = audience
        self._issuer = issuer
        self._required = ["exp", "sub"]
        self._required += ["aud"] if audience is not None else []
        self._required += ["iss"] if issuer is not None else []

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenVerifier:
        return cls(
            secret=settings.jwt_secret,
            public_key_pem=settings.jwt_public_key,
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
        )

    @property
    def algorithm(self) -> str:
        return self._algorithm

    def verify(self, token: str) -> Principal:
        """The token's principal, or AuthenticationError (401) with a reason safe to show."""
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthenticationError("token too large")
        return principal_from_claims(self._decode(token))

    def _decode(self, token: str) -> dict[str, object]:
        """Verified claims; each key in turn while the signature is the only objection."""
        for index, key in enumerate(self._keys):
            try:
                claims: dict[str, object] = jwt.decode(
                    token,
                    key,
                    algorithms=[self._algorithm],
                    options={"require": self._required, "enforce_minimum_key_length": True},
                    audience=self._audience,
                    issuer=self._issuer,
                    leeway=LEEWAY_S,
                )
            except jwt.InvalidSignatureError:
                if index + 1 < len(self._keys):
                    continue
                raise AuthenticationError("bad token signature") from None
            except jwt.PyJWTError as exc:
                # The reason is ours, never PyJWT's text: nothing of the token goes back or to
                # logs.
                raise AuthenticationError(_reason(exc)) from None
            return claims
        raise AuthenticationError("bad token signature")  # no key at all: never configured


def principal_from_claims(claims: Mapping[str, object]) -> Principal:
    """Strict claim types: a token that PyJWT verified may still carry values we cannot trust."""
    _check_exp(claims.get("exp"))
    return Principal(
        user_id=_user_id(claims.get("sub")),
        client_id=_client_id(claims.get("client_id")),
        # No permissions claim grants nothing: the caller is known, and each operation says 403.
        permissions=_permissions(claims.get("permissions", [])),
    )


def parse_bearer(header_value: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if header_value is None or not header_value.strip():
        raise AuthenticationError("missing bearer token")
    parts = header_value.split()
    if parts[0].lower() != "bearer":
        raise AuthenticationError("the Authorization scheme must be Bearer")
    if len(parts) != 2:
        raise AuthenticationError("expected exactly one bearer token")
    return parts[1]


def mint_token(
    principal: Principal,
    *,
    ttl_s: int = DEFAULT_TTL_S,
    secret: str | None = None,
    private_key_pem: str | bytes | None = None,
    now: float | None = None,
    audience: str | None = None,
    issuer: str | None = None,
) -> str:
    """A token for ``principal``: HS256 with ``secret`` or RS256 with a PEM private key.

    For local use and tests (``importer token``); production tokens come from the identity
    provider. ``now`` lets tests mint tokens that are already expired.
    """
    if ttl_s < 1:
        raise ConfigurationError("the token's ttl must be at least 1 second")
    algorithm, key = _signing_key(secret, private_key_pem)
    issued_at = int(time.time() if now is None else now)
    claims = {
        "sub": principal.user_id,
        "client_id": principal.client_id,
        "permissions": sorted(p.value for p in principal.permissions),
        "iat": issued_at,
        "exp": issued_at + ttl_s,
    }
    claims |= {"aud": audience} if audience is not None else {}
    claims |= {"iss": issuer} if issuer is not None else {}
    return jwt.encode(claims, key, algorithm=algorithm)


def _verification_keys(
    secret: str | None, public_key_pem: str | None
) -> tuple[str, tuple[bytes | RSAPublicKey, ...]]:
    if secret is not None and public_key_pem is not None:
        raise ConfigurationError(
            "JWT_SECRET and JWT_PUBLIC_KEY are both set: a server accepts one algorithm only"
        )
    if secret is not None:
        return HS256, (_hmac_secret(secret),)
    if public_key_pem is not None:
        return RS256, tuple(_rsa_public_key(block) for block in _pem_blocks(public_key_pem))
    raise ConfigurationError("set JWT_SECRET (HS256) or JWT_PUBLIC_KEY (RS256)")


def _signing_key(
    secret: str | None, private_key_pem: str | bytes | None
) -> tuple[str, bytes | RSAPrivateKey]:
    if secret is not None and private_key_pem is not None:
        raise ConfigurationError("sign with a secret (HS256) or a private key (RS256), not both")
    if secret is not None:
        return HS256, _hmac_secret(secret)
    if private_key_pem is not None:
        return RS256, _rsa_private_key(private_key_pem)
    raise ConfigurationError("JWT_SECRET is not set (or pass an RS256 private key)")


def _hmac_secret(secret: str) -> bytes:
    key = secret.encode()
    if len(key) < MIN_SECRET_BYTES:
        raise ConfigurationError(f"JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes")
    return key


def _pem_bytes(pem: str | bytes) -> bytes:
    """PEM from an environment variable often arrives with its newlines escaped as ``\\n``."""
    raw = pem.encode() if isinstance(pem, str) else pem
    return raw.replace(b"\\n", b"\n").strip()


_PEM_END = b"-----END PUBLIC KEY-----"


# Keys one JWT_PUBLIC_KEY may hold: the current and the next (or previous) of a rotation, with
# room to spare; each costs a signature check on a token the earlier ones did not sign.
MAX_PUBLIC_KEYS = 4


def _pem_blocks(pem: str) -> list[bytes]:
    """The PEM blocks of ``JWT_PUBLIC_KEY``, in order (one or more, concatenated)."""
    raw = _pem_bytes(pem)
    blocks = [part.strip() + b"\n" + _PEM_END for part in raw.split(_PEM_END) if part.strip()]
    if not 1 <= len(blocks) <= MAX_PUBLIC_KEYS:
        raise ConfigurationError(f"JWT_PUBLIC_KEY must hold 1 to {MAX_PUBLIC_KEYS} PEM keys")
    return blocks


def _rsa_public_key(pem: str | bytes) -> RSAPublicKey:
    try:
        key = load_pem_public_key(_pem_bytes(pem))
    except ValueError as exc:
        raise ConfigurationError("JWT_PUBLIC_KEY is not a PEM public key") from exc
    if not isinstance(key, RSAPublicKey) or key.key_size < MIN_RSA_BITS:
        raise ConfigurationError(f"JWT_PUBLIC_KEY must be an RSA key of {MIN_RSA_BITS}+ bits")
    return key


def _rsa_private_key(pem: str | bytes) -> RSAPrivateKey:
    try:
        key = load_pem_private_key(_pem_bytes(pem), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError("not an unencrypted PEM private key") from exc
    if not isinstance(key, RSAPrivateKey) or key.key_size < MIN_RSA_BITS:
        raise ConfigurationError(f"the private key must be an RSA key of {MIN_RSA_BITS}+ bits")
    return key


# Most specific first: InvalidSignatureError is a DecodeError.
_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAlgorithmError, "token algorithm not accepted"),
    (jwt.InvalidSignatureError, "bad token signature"),
    (jwt.MissingRequiredClaimError, "token lacks a required claim"),
    (jwt.InvalidAudienceError, "token audience not accepted"),
    (jwt.InvalidIssuerError, "token issuer not accepted"),
    (InvalidSubjectError, "token sub must be a non-empty string"),
    (jwt.DecodeError, "malformed token"),
)


def _reason(exc: jwt.PyJWTError) -> str:
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"token lacks the {exc.claim} claim"  # our own claim name, not token content
    return next((reason for kind, reason in _REASONS if isinstance(exc, kind)), "invalid token")


def _is_int(value: object) -> TypeGuard[int]:
    """JSON true/false decode to bool, a subclass of int: never let ``true`` be tenant 1."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_exp(exp: object) -> None:
    # PyJWT casts exp with int(), so "9999999999" (a string) would pass its check.
    if not (_is_int(exp) or isinstance(exp, float)):
        raise AuthenticationError("token exp must be a number")


def _user_id(sub: object) -> str:
    if not isinstance(sub, str) or not sub:
        raise AuthenticationError("token sub must be a non-empty string")
    return sub


def _client_id(value: object) -> int:
    if not _is_int(value):
        raise AuthenticationError("token client_id must be an integer")
    if not 1 <= value <= MAX_CLIENT_ID:
        raise AuthenticationError("token client_id out of range")
    return value


def _permissions(value: object) -> frozenset[Permission]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise AuthenticationError("token permissions must be a list of strings")
    return _known_permissions(value)


def _known_permissions(names: Iterable[str]) -> frozenset[Permission]:
    """Unknown names are ignored, not refused.

    The identity provider issues one token for the whole platform, with permissions of other
    services too, and adds new ones over time: refusing what we do not know would lock every
    user out on the day a permission is added elsewhere. Ignoring is safe, because an unknown
    string grants nothing here (``require`` only accepts our own members).
    """
    known = {p.value for p in Permission}
    return frozenset(Permission(name) for name in names if name in known)

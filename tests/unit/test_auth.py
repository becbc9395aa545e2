"""Bearer tokens: what verifies, what is refused (and why), and the round trip through minting."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given
from hypothesis import strategies as st

from importer.core.errors import AuthenticationError, ConfigurationError, PermissionDeniedError
from importer.core.principals import Permission, Principal
from importer.http.auth import (
    LEEWAY_S,
    MAX_CLIENT_ID,
    MAX_TOKEN_CHARS,
    TokenVerifier,
    mint_token,
    parse_bearer,
)
from importer.settings import Settings

SECRET = "s3cret-for-tests-only-0123456789abcdef"
ALICE = Principal(
    user_id="alice",
    client_id=42,
    permissions=frozenset({Permission.CONTACT_IMPORT_CREATE, Permission.HSM_CREATE}),
)


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def private_pem(rsa_key: rsa.RSAPrivateKey) -> bytes:
    return rsa_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.fixture(scope="module")
def public_pem(rsa_key: rsa.RSAPrivateKey) -> str:
    return (
        rsa_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture
def hs256() -> TokenVerifier:
    return TokenVerifier(secret=SECRET)


@pytest.fixture
def rs256(public_pem: str) -> TokenVerifier:
    return TokenVerifier(public_key_pem=public_pem)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def segment(document: dict[str, object]) -> str:
    return b64url(json.dumps(document).encode())


def claims(**overrides: object) -> dict[str, object]:
    """Valid claims for ALICE; an override of None removes the claim."""
    document: dict[str, object] = {
        "sub": "alice",
        "client_id": 42,
        "permissions": ["CONTACT_IMPORT.CREATE", "HSM.CREATE"],
        "exp": int(time.time()) + 600,
    }
    document.update(overrides)
    return {k: v for k, v in document.items() if v is not None}


def hs256_token(payload: dict[str, object], secret: str | bytes = SECRET) -> str:
    """Signed by hand, so any secret (even a PEM, which PyJWT refuses) can be used."""
    key = secret.encode() if isinstance(secret, str) else secret
    signing_input = f"{segment({'alg': 'HS256', 'typ': 'JWT'})}.{segment(payload)}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def refused(verifier: TokenVerifier, token: str) -> str:
    """The 401 reason; it must never echo the token."""
    with pytest.raises(AuthenticationError) as caught:
        verifier.verify(token)
    reason = str(caught.value)
    if token:
        assert token not in reason
    return reason


# --- accepted ---------------------------------------------------------------------------------


def test_hs256_token_verifies(hs256: TokenVerifier) -> None:
    assert hs256.algorithm == "HS256"
    assert hs256.verify(mint_token(ALICE, secret=SECRET)) == ALICE


def test_rs256_token_verifies(rs256: TokenVerifier, private_pem: bytes) -> None:
    assert rs256.algorithm == "RS256"
    assert rs256.verify(mint_token(ALICE, private_key_pem=private_pem)) == ALICE


def test_verifier_from_settings_and_pem_with_escaped_newlines(
    public_pem: str, private_pem: bytes
) -> None:
    settings = Settings.from_environ({"JWT_PUBLIC_KEY": public_pem.replace("\n", "\\n")})
    verifier = TokenVerifier.from_settings(settings)
    assert verifier.verify(mint_token(ALICE, private_key_pem=private_pem)) == ALICE


def test_expiry_within_the_leeway_is_tolerated(hs256: TokenVerifier) -> None:
    late = mint_token(ALICE, secret=SECRET, ttl_s=60, now=time.time() - 60 - LEEWAY_S // 2)
    assert hs256.verify(late) == ALICE


def test_unknown_permissions_are_ignored_and_absent_ones_grant_nothing(
    hs256: TokenVerifier,
) -> None:
    token = hs256_token(claims(permissions=["IMPORT.ADMIN", "BILLING.READ"]))
    assert hs256.verify(token).permissions == {Permission.IMPORT_ADMIN}
    assert hs256.verify(hs256_token(claims(permissions=None))).permissions == frozenset()


# --- refused ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none_is_refused(hs256: TokenVerifier, rs256: TokenVerifier, alg: str) -> None:
    token = f"{segment({'alg': alg, 'typ': 'JWT'})}.{segment(claims())}."
    assert refused(hs256, token) == "token algorithm not accepted"
    assert refused(rs256, token) == "token algorithm not accepted"


def test_hs256_signed_with_the_public_key_is_refused_by_an_rs256_server(
    rs256: TokenVerifier, public_pem: str
) -> None:
    """Algorithm confusion: the attacker knows the public key and uses it as an HMAC secret."""
    forged = hs256_token(claims(permissions=["IMPORT.ADMIN"]), secret=public_pem)
    assert refused(rs256, forged) == "token algorithm not accepted"


def test_rs256_token_is_refused_by_an_hs256_server(
    hs256: TokenVerifier, private_pem: bytes
) -> None:
    assert refused(hs256, mint_token(ALICE, private_key_pem=private_pem)) == (
        "token algorithm not accepted"
    )


def test_wrong_secret_is_refused(hs256: TokenVerifier) -> None:
    token = mint_token(ALICE, secret="another-secret-of-enough-length-000000")
    assert refused(hs256, token) == "bad token signature"


def test_tampered_payload_is_refused(hs256: TokenVerifier) -> None:
    header, _, signature = mint_token(ALICE, secret=SECRET).split(".")
    other_tenant = segment(claims(client_id=43))
    assert refused(hs256, f"{header}.{other_tenant}.{signature}") == "bad token signature"


def test_expired_token_is_refused(hs256: TokenVerifier) -> None:
    token = mint_token(ALICE, secret=SECRET, ttl_s=60, now=time.time() - 3600)
    assert refused(hs256, token) == "token expired"


def test_token_issued_in_the_future_is_refused(hs256: TokenVerifier) -> None:
    token = mint_token(ALICE, secret=SECRET, now=time.time() + 10 * LEEWAY_S)
    assert refused(hs256, token) == "token not yet valid"


@pytest.mark.parametrize("claim", ["exp", "sub"])
def test_missing_required_claim_is_refused(hs256: TokenVerifier, claim: str) -> None:
    token = hs256_token(claims(**{claim: None}))
    assert refused(hs256, token) == f"token lacks the {claim} claim"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"client_id": "42"}, "token client_id must be an integer"),
        ({"client_id": True}, "token client_id must be an integer"),
        ({"client_id": 42.0}, "token client_id must be an integer"),
        ({"client_id": None}, "token client_id must be an integer"),
        ({"client_id": -1}, "token client_id out of range"),
        ({"client_id": 0}, "token client_id out of range"),
        ({"client_id": MAX_CLIENT_ID + 1}, "token client_id out of range"),
        ({"permissions": "CONTACT_IMPORT.CREATE"}, "token permissions must be a list of strings"),
        ({"permissions": {"CONTACT_IMPORT.CREATE": True}}, "token permissions must be a list"),
        ({"permissions": ["HSM.CREATE", 1]}, "token permissions must be a list of strings"),
        ({"sub": ""}, "token sub must be a non-empty string"),
        ({"sub": 7}, "token sub must be a non-empty string"),
        # A fixed far-future time: parameters are built when the module is collected, maybe
        # long before the test runs.
        ({"exp": "4102444800"}, "token exp must be a number"),
    ],
)
def test_badly_typed_claims_are_refused(
    hs256: TokenVerifier, overrides: dict[str, object], reason: str
) -> None:
    assert refused(hs256, hs256_token(claims(**overrides))).startswith(reason)


def test_oversized_token_is_refused_before_decoding(hs256: TokenVerifier) -> None:
    token = hs256_token(claims(padding="x" * MAX_TOKEN_CHARS))
    assert refused(hs256, token) == "token too large"


@pytest.mark.parametrize(
    "garbage",
    ["", "garbage", "a.b", "a.b.c", "....", "ünïcödé.x.y", f"{segment({'alg': 'HS256'})}.!!.x"],
)
def test_garbage_is_refused(hs256: TokenVerifier, garbage: str) -> None:
    assert refused(hs256, garbage) == "malformed token"


def test_unsigned_or_headerless_tokens_are_refused(hs256: TokenVerifier) -> None:
    assert refused(hs256, f"{segment({'alg': 'HS256'})}.{segment(claims())}.") == (
        "bad token signature"
    )
    assert refused(hs256, "e30.e30.e30") == "token algorithm not accepted"  # header {}


def test_payload_that_is_not_an_object_is_refused(hs256: TokenVerifier) -> None:
    signing_input = f"{segment({'alg': 'HS256'})}.{b64url(b'[1, 2]')}"
    signature = hmac.new(SECRET.encode(), signing_input.encode(), hashlib.sha256).digest()
    assert refused(hs256, f"{signing_input}.{b64url(signature)}") == "malformed token"


# --- the Authorization header -----------------------------------------------------------------


@pytest.mark.parametrize(
    "header", ["Bearer abc.def.ghi", "bearer abc.def.ghi", "BEARER  abc.def.ghi"]
)
def test_parse_bearer_takes_the_one_token(header: str) -> None:
    assert parse_bearer(header) == "abc.def.ghi"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing bearer token"),
        ("", "missing bearer token"),
        ("   ", "missing bearer token"),
        ("Basic dXNlcjpwYXNz", "the Authorization scheme must be Bearer"),
        ("Token abc", "the Authorization scheme must be Bearer"),
        ("abc.def.ghi", "the Authorization scheme must be Bearer"),
        ("Bearer", "expected exactly one bearer token"),
        ("Bearer abc def", "expected exactly one bearer token"),
    ],
)
def test_parse_bearer_refuses(header: str | None, reason: str) -> None:
    with pytest.raises(AuthenticationError, match=f"^{reason}$"):
        parse_bearer(header)


# --- permissions ------------------------------------------------------------------------------


def test_require_refuses_a_permission_the_token_does_not_grant() -> None:
    ALICE.require(Permission.CONTACT_IMPORT_CREATE)
    with pytest.raises(PermissionDeniedError, match=r"IMPORT\.ADMIN"):
        ALICE.require(Permission.IMPORT_ADMIN)


# --- configuration ----------------------------------------------------------------------------


def test_exactly_one_key_must_be_configured(public_pem: str) -> None:
    with pytest.raises(ConfigurationError, match="JWT_SECRET"):
        TokenVerifier()
    with pytest.raises(ConfigurationError, match="both set"):
        TokenVerifier(secret=SECRET, public_key_pem=public_pem)
    with pytest.raises(ConfigurationError, match="both set"):
        TokenVerifier.from_settings(Settings(jwt_secret=SECRET, jwt_public_key=public_pem))


def test_weak_or_wrong_keys_are_configuration_errors(private_pem: bytes) -> None:
    with pytest.raises(ConfigurationError, match="at least 32 bytes"):
        TokenVerifier(secret="short")
    with pytest.raises(ConfigurationError, match="not a PEM public key"):
        TokenVerifier(public_key_pem="not a pem")
    with pytest.raises(ConfigurationError, match="not a PEM public key"):
        TokenVerifier(public_key_pem=private_pem.decode())
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    small_pem = small.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ConfigurationError, match="2048"):
        TokenVerifier(public_key_pem=small_pem.decode())


def test_mint_token_needs_one_key_and_a_positive_ttl(private_pem: bytes) -> None:
    with pytest.raises(ConfigurationError, match="JWT_SECRET is not set"):
        mint_token(ALICE)
    with pytest.raises(ConfigurationError, match="not both"):
        mint_token(ALICE, secret=SECRET, private_key_pem=private_pem)
    with pytest.raises(ConfigurationError, match="ttl"):
        mint_token(ALICE, secret=SECRET, ttl_s=0)
    with pytest.raises(ConfigurationError, match="private key"):
        mint_token(ALICE, private_key_pem=b"not a pem")


def test_minted_claims_are_the_documented_ones() -> None:
    token = mint_token(ALICE, secret=SECRET, ttl_s=120, now=1_000_000)
    payload = jwt.decode(token, options={"verify_signature": False})
    assert payload == {
        "sub": "alice",
        "client_id": 42,
        "permissions": ["CONTACT_IMPORT.CREATE", "HSM.CREATE"],
        "iat": 1_000_000,
        "exp": 1_000_120,
    }
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


# --- the round trip ---------------------------------------------------------------------------


@given(
    user_id=st.text(min_size=1, max_size=64),
    client_id=st.integers(1, MAX_CLIENT_ID),
    permissions=st.frozensets(st.sampled_from(Permission)),
)
def test_any_minted_token_verifies_to_the_same_principal(
    user_id: str, client_id: int, permissions: frozenset[Permission]
) -> None:
    principal = Principal(user_id=user_id, client_id=client_id, permissions=permissions)
    assert TokenVerifier(secret=SECRET).verify(mint_token(principal, secret=SECRET)) == principal


# --- audience and issuer (JWT_AUDIENCE, JWT_ISSUER) -------------------------------------------


def _claims_token(**extra: object) -> str:
    now = int(time.time())
    claims = {"sub": "alice", "client_id": 42, "exp": now + 600, "iat": now, **extra}
    return jwt.encode(claims, SECRET, algorithm="HS256")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({}, "token lacks the aud claim"),
        ({"aud": "other-service", "iss": "https://idp.example"}, "token audience not accepted"),
        ({"aud": "importer"}, "token lacks the iss claim"),
        ({"aud": "importer", "iss": "https://evil.example"}, "token issuer not accepted"),
    ],
)
def test_audience_and_issuer_are_enforced_when_set(extra: dict[str, object], reason: str) -> None:
    verifier = TokenVerifier(secret=SECRET, audience="importer", issuer="https://idp.example")
    with pytest.raises(AuthenticationError, match=f"^{reason}$"):
        verifier.verify(_claims_token(**extra))


def test_a_token_naming_the_audience_and_issuer_verifies() -> None:
    verifier = TokenVerifier(secret=SECRET, audience="importer", issuer="https://idp.example")
    token = _claims_token(aud=["importer", "crm"], iss="https://idp.example")
    assert verifier.verify(token).client_id == 42
    minted = mint_token(ALICE, secret=SECRET, audience="importer", issuer="https://idp.example")
    assert verifier.verify(minted) == ALICE


def test_audience_and_issuer_come_from_the_environment() -> None:
    settings = Settings.from_environ(
        {"JWT_SECRET": SECRET, "JWT_AUDIENCE": "importer", "JWT_ISSUER": "https://idp.example"}
    )
    verifier = TokenVerifier.from_settings(settings)
    with pytest.raises(AuthenticationError, match="aud"):
        verifier.verify(_claims_token())
    assert verifier.verify(_claims_token(aud="importer", iss="https://idp.example")).user_id == (
        "alice"
    )

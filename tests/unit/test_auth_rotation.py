"""RS256 key rotation: JWT_PUBLIC_KEY may hold several PEM keys; a token signed by any verifies."""

from __future__ import annotations

import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from importer.core.errors import AuthenticationError, ConfigurationError
from importer.core.principals import Permission, Principal
from importer.http.auth import MAX_PUBLIC_KEYS, TokenVerifier, mint_token

ANA = Principal("ana", 7, frozenset({Permission.IMPORT_ADMIN}))


def keypair() -> tuple[bytes, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


@pytest.fixture(scope="module")
def keys() -> list[tuple[bytes, str]]:
    return [keypair() for _ in range(3)]


def test_tokens_of_either_key_verify_during_a_rotation(keys: list[tuple[bytes, str]]) -> None:
    (old_private, old_public), (new_private, new_public), (stranger, _) = keys
    verifier = TokenVerifier(public_key_pem=old_public + new_public)
    for private in (old_private, new_private):
        assert verifier.verify(mint_token(ANA, private_key_pem=private)) == ANA
    with pytest.raises(AuthenticationError, match="bad token signature"):
        verifier.verify(mint_token(ANA, private_key_pem=stranger))
    expired = mint_token(ANA, private_key_pem=new_private, ttl_s=60, now=time.time() - 3600)
    with pytest.raises(AuthenticationError, match="expired"):  # the second key's real reason
        verifier.verify(expired)
    escaped = (old_public + new_public).replace("\n", "\\n")  # as an environment file holds it
    assert TokenVerifier(public_key_pem=escaped).verify(
        mint_token(ANA, private_key_pem=new_private)
    )


def test_a_bad_block_or_too_many_keys_fail_the_start(keys: list[tuple[bytes, str]]) -> None:
    public = keys[0][1]
    with pytest.raises(ConfigurationError):
        TokenVerifier(public_key_pem=public + "garbage\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ConfigurationError, match="PEM keys"):
        TokenVerifier(public_key_pem=public * (MAX_PUBLIC_KEYS + 1))

"""Bearer tokens over HTTP and tenant isolation, enumerated from the OpenAPI document."""

from __future__ import annotations

import base64
import itertools
import pathlib
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest

from importer.core.principals import Permission, Principal
from importer.http.auth import mint_token
from tests.api.conftest import start_server, stop_server
from tests.api.support import (
    ADMIN,
    CREATE,
    HSM,
    SECRET,
    auth,
    csv_bytes,
    token,
    upload,
    wait_terminal,
)
from tests.support import cpf

pytestmark = pytest.mark.api

ALL = (CREATE, HSM, ADMIN)
MISSING = {"job_id": str(uuid.UUID(int=0)), "layout_id": str(2**63 - 1)}


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def alg_none_token(client_id: int) -> str:
    header = b64url(orjson.dumps({"alg": "none", "typ": "JWT"}))
    claims = {
        "sub": "mallory",
        "client_id": client_id,
        "permissions": [p.value for p in ALL],
        "exp": int(time.time()) + 600,
    }
    return f"{header}.{b64url(orjson.dumps(claims))}."


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message"}, body
    assert body["error"] == code
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer a b",
        "Bearer not.a.jwt",
        "Bearer " + "x" * 9000,
    ],
)
async def test_missing_or_malformed_credentials_are_401(
    http: httpx.AsyncClient, header: str | None
) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = await http.get("/v1/imports", headers=headers)
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_forged_expired_and_foreign_tokens_are_401(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    principal = Principal("ana", client, frozenset(ALL))
    forged = {
        "alg none": alg_none_token(client),
        "expired": token(client, ttl_s=60, now=time.time() - 3600),
        "bad signature": mint_token(principal, secret="another-secret-" + "y" * 32),
        "tampered": token(client)[:-4] + "AAAA",
    }
    for name, bearer in forged.items():
        response = await http.get("/v1/imports", headers=auth(bearer))
        assert_error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer"), name


async def test_missing_permission_is_403(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    nothing = token(client, permissions=[])
    assert_error(await http.get("/v1/imports", headers=auth(nothing)), 403, "forbidden")
    assert_error(await upload(http, nothing, b"cpf\n1\n"), 403, "forbidden")
    assert_error(await http.get("/v1/layouts", headers=auth(nothing)), 403, "forbidden")
    hsm_only = token(client, permissions=[HSM])
    assert_error(await upload(http, hsm_only, b"cpf\n1\n"), 403, "forbidden")


async def test_unknown_route_and_method_have_the_error_shape(http: httpx.AsyncClient) -> None:
    assert_error(await http.get("/v1/nothing-here"), 404, "not_found")
    assert_error(await http.delete("/healthz"), 405, "method_not_allowed")


# Bodies that pass validation, so each request reaches the ownership check. A new route with a
# required body must be added here: the enumeration below refuses to guess.
SAMPLE_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("put", "/v1/layouts/{layout_id}"): {"json": {"name": "x", "document": {"columns": []}}},
    ("put", "/v1/uploads/{job_id}"): {"content": b"nome,cpf\n"},
    ("put", "/v1/imports/{job_id}/columns"): {"json": {"columns": []}},
}


async def test_every_route_with_an_id_hides_other_tenants_objects(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    """T21: tenant B probes every {id} route with tenant A's ids and gets 404, never data."""
    owner, intruder = next(client_ids), next(client_ids)
    owner_token = token(owner, permissions=ALL)
    content = csv_bytes(("nome", "cpf"), [("A", cpf(1400))])
    job_id = (await upload(http, owner_token, content)).json()["id"]
    await wait_terminal(http, owner_token, job_id)
    layout = await http.post(
        "/v1/layouts",
        json={"name": "mine", "document": {"columns": {"Doc": "cpf_cnpj"}}},
        headers=auth(owner_token),
    )
    ids = {"job_id": job_id, "layout_id": str(layout.json()["id"])}
    schema = (await http.get("/openapi.json")).json()
    probed = []
    intruder_headers = auth(token(intruder, permissions=ALL))
    for path, operations in schema["paths"].items():
        if "{" not in path:
            continue
        for method, operation in operations.items():
            kwargs = SAMPLE_BODIES.get((method, path), {})
            needs_body = operation.get("requestBody", {}).get("required", False)
            assert kwargs or not needs_body, f"add a sample body for {method.upper()} {path}"
            url = path.format(**ids)
            response = await http.request(method, url, headers=intruder_headers, **kwargs)
            assert response.status_code == 404, (method, path, response.text)
            # Exactly what an id that exists nowhere gets: nothing tells the two apart.
            baseline = await http.request(
                method, path.format(**MISSING), headers=intruder_headers, **kwargs
            )
            expected = baseline.text
            for name, value in ids.items():
                expected = expected.replace(MISSING[name], value)
            assert (baseline.status_code, response.text) == (404, expected), (method, path)
            probed.append((method, path))
    assert len(probed) >= 10, probed
    still_there = await http.get(f"/v1/imports/{job_id}", headers=auth(owner_token))
    assert still_there.status_code == 200
    unchanged = await http.get(f"/v1/layouts/{ids['layout_id']}", headers=auth(owner_token))
    assert unchanged.json()["name"] == "mine"


async def test_plain_users_see_their_own_jobs_admins_the_tenant(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    ana = token(client, "ana")
    content = csv_bytes(("nome", "cpf"), [("A", cpf(1500))])
    job_id = (await upload(http, ana, content)).json()["id"]
    bob = token(client, "bob")
    for url in (f"/v1/imports/{job_id}", f"/v1/imports/{job_id}/errors"):
        assert_error(await http.get(url, headers=auth(bob)), 404, "not_found")
    assert_error(
        await http.post(f"/v1/imports/{job_id}/cancel", headers=auth(bob)), 404, "not_found"
    )
    admin = token(client, "root", [Permission.IMPORT_ADMIN])
    seen = await http.get(f"/v1/imports/{job_id}", headers=auth(admin))
    assert seen.status_code == 200
    assert seen.json()["user_id"] == "ana"
    await wait_terminal(http, ana, job_id)


async def test_ids_that_are_not_ids_are_400(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    response = await http.get("/v1/imports/not-a-uuid", headers=auth(bearer))
    assert response.status_code == 400
    assert response.json()[0]["field"] == "job_id"
    response = await http.get("/v1/layouts/99999999999999999999", headers=auth(bearer))
    assert response.status_code == 400


async def test_audience_and_issuer_are_enforced_over_http(
    api_db: str, tmp_path: pathlib.Path
) -> None:
    """With JWT_AUDIENCE and JWT_ISSUER set, a token minted for another audience or by another
    issuer (same key) is a 401; one naming both is accepted."""
    claims = {"JWT_AUDIENCE": "importer-api", "JWT_ISSUER": "https://idp.example"}
    running = start_server(
        api_db, tmp_path / "serve.log", IMPORTER_STORAGE_DIR=str(tmp_path), **claims
    )
    principal = Principal("ana", 4242, frozenset({CREATE}))
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as client:
            for audience, issuer in [
                (None, None),
                ("other-api", "https://idp.example"),
                ("importer-api", None),
                ("importer-api", "https://evil.example"),
            ]:
                bearer = mint_token(principal, secret=SECRET, audience=audience, issuer=issuer)
                refused = await client.get("/v1/imports", headers=auth(bearer))
                assert refused.status_code == 401, (audience, issuer, refused.text)
            bearer = mint_token(
                principal, secret=SECRET, audience="importer-api", issuer="https://idp.example"
            )
            assert (await client.get("/v1/imports", headers=auth(bearer))).status_code == 200
    finally:
        stop_server(running)

"""Property-based fuzzing of every documented operation: whatever schemathesis sends, no 5xx.

The schema is the running server's own ``/openapi.json``; the bearer token (a tenant of its own,
every permission) gets each request past authentication, so the generated bodies, paths and
queries reach the routes' validation and the use cases behind it. Each operation is one test with
data that fits the schema and, when it takes parameters or a body, one with data that does not;
few examples each, derandomized: the run is bounded in time and the same from one run to the
next. Imports the fuzzing creates are cancelled after each test.

Schemathesis is used through its Hypothesis strategies (``operation.as_strategy()`` under
``@given``) rather than ``schemathesis.pytest.from_fixture``: the lazy loader rewrites pytest's
private ``Node._nodeid``, which pytest 9.2 no longer has. The operations are parametrized from
the app's own document (built in-process, no resources opened), and the served schema must list
exactly the same ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.schemas import BaseSchema

from importer.http.app import create_app
from importer.settings import Settings
from tests.api.conftest import Server
from tests.api.support import ADMIN, CREATE, HSM, TERMINAL, auth, token

pytestmark = pytest.mark.api

# Per operation and mode: enough to reach the validation branches, few enough for the whole
# module (19 operations, 34 cases) to take well under a minute on two cores.
MAX_EXAMPLES = 25
REQUEST_TIMEOUT_S = 10


def documented_operations() -> list[tuple[str, str, bool]]:
    """(METHOD, path, takes input) of every operation the app documents."""
    document = create_app(Settings()).openapi()
    return sorted(
        (method.upper(), path, bool(op.get("parameters") or op.get("requestBody")))
        for path, item in document["paths"].items()
        for method, op in item.items()
    )


OPERATIONS = documented_operations()
# Data that does not fit the schema needs something to put it in: operations without
# parameters or a body (/healthz, GET /v1/layouts, …) get positive cases only.
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode}")
    for method, path, takes_input in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if takes_input or mode is GenerationMode.POSITIVE
]


@pytest.fixture(scope="module")
def api_schema(server: Server) -> BaseSchema:
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", timeout=REQUEST_TIMEOUT_S)


@pytest.fixture
def bearer(server: Server, client_ids: itertools.count[int]) -> Iterator[str]:
    """A tenant of its own with every permission: no operation stops at 403. The imports the
    fuzzing created are cancelled afterwards, so the session's workers do not spend the next
    tests' time on generated files."""
    minted = token(next(client_ids), "fuzz", (CREATE, HSM, ADMIN))
    yield minted
    with httpx.Client(base_url=server.url, headers=auth(minted), timeout=10) as http:
        listed = http.get("/v1/imports", params={"limit": 100})
        assert listed.status_code == 200, listed.text
        for job in listed.json()["items"]:
            if job["status"] not in TERMINAL:
                http.post(f"/v1/imports/{job['id']}/cancel")


def test_the_served_schema_documents_these_operations(api_schema: BaseSchema) -> None:
    served = sorted(
        (op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()
    )
    assert served == [(method, path) for method, path, _ in OPERATIONS]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_no_server_error(
    api_schema: BaseSchema, bearer: str, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]
    cases = operation.as_strategy(generation_mode=mode, headers=auth(bearer))

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def call(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=[not_a_server_error], timeout=REQUEST_TIMEOUT_S)

    call()

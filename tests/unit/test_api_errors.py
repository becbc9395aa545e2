"""The API's one error shape: codes and statuses per exception, no internals in 5xx answers."""

from __future__ import annotations

import orjson
import pytest

from importer.core.errors import (
    AuthenticationError,
    ImportAlreadyAppliedError,
    ImporterError,
    InvalidRequestError,
    JobNotFoundError,
    JobNotReadyError,
    ObjectTooLargeError,
    PermissionDeniedError,
    StorageError,
    StoreError,
    TransientStoreError,
)
from importer.http.errors import error_response


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (AuthenticationError("token expired"), 401, "unauthorized"),
        (PermissionDeniedError(), 403, "forbidden"),
        (JobNotFoundError(), 404, "not_found"),
        (ImportAlreadyAppliedError(), 409, "import_already_applied"),
        (JobNotReadyError(), 409, "not_uploaded"),
        (ObjectTooLargeError(), 413, "too_large"),
        (ImporterError("a bug"), 500, "internal_error"),
    ],
)
def test_codes(error: ImporterError, status: int, code: str) -> None:
    response = error_response(error)
    assert response.status_code == status
    assert orjson.loads(response.body)["error"] == code
    assert ("www-authenticate" in response.headers) == (status == 401)


def test_validation_is_a_list_of_field_problems() -> None:
    response = error_response(InvalidRequestError([("size", "is required"), ("a", "b")]))
    assert response.status_code == 400
    assert orjson.loads(response.body) == [
        {"field": "size", "message": "is required"},
        {"field": "a", "message": "b"},
    ]


@pytest.mark.parametrize(
    "error",
    [
        StoreError("UniqueViolationError: duplicate key value violates secret_index"),
        TransientStoreError("ConnectionResetError: 10.0.0.7:5432"),
        StorageError("object 'k': AccessDenied: arn:aws:iam::123"),
    ],
)
def test_unavailable_answers_do_not_carry_driver_text(error: ImporterError) -> None:
    response = error_response(error)
    assert response.status_code == 503
    body = orjson.loads(response.body)
    assert body["error"] in ("database_unavailable", "storage_unavailable")
    assert str(error) not in body["message"]

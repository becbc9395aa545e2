"""The documented request shapes stay in step with the validator that enforces them."""

from __future__ import annotations

from importer.core.options import OPTION_FIELDS, REQUIRED_OPTIONS
from importer.http import openapi


def test_documented_options_are_the_validated_ones() -> None:
    fields = openapi.ImportOptionsBody.model_fields
    assert set(fields) == set(OPTION_FIELDS)
    required = {name for name, field in fields.items() if field.is_required()}
    assert required == set(REQUIRED_OPTIONS)


def test_request_bodies_are_flat_schemas() -> None:
    """Inline schemas in openapi_extra cannot carry $defs: the body models must stay flat."""
    for model in (
        openapi.MultipartImportForm,
        openapi.HsmImportForm,
        openapi.ImportFromKeyBody,
        openapi.UploadRequestBody,
        openapi.LayoutBody,
        openapi.StartBody,
    ):
        assert "$defs" not in model.model_json_schema(), model.__name__


def test_error_responses_document_the_400_list() -> None:
    responses = openapi.error_responses(404)
    assert set(responses) == {400, 401, 403, 404, 503}
    assert responses[400]["model"] == list[openapi.FieldProblem]

"""core.legacy: what `importer db check` reports of other writers' rows (pure)."""

from __future__ import annotations

from importer.core.legacy import Finding, channel_finding, duplicate, key_finding
from importer.core.models import Channel
from tests.support import cpf

A = cpf(4101)


def test_a_key_the_importer_matches_is_no_finding_whatever_its_spelling() -> None:
    for stored in (A, f"{A[:3]}.{A[3:6]}.{A[6:9]}-{A[9:]}", f" {A} ", A.lstrip("0")):
        assert key_finding(1, 10, stored) is None, stored


def test_an_invalid_key_is_reported_with_its_reason() -> None:
    found = key_finding(1, 10, "123.456.789-00")
    assert found is not None
    assert found.kind is Finding.INVALID_KEY
    assert (found.contact_ids, found.stored, found.normal_form) == (
        (10,),
        ("123.456.789-00",),
        None,
    )
    assert found.reason == "invalid_cpf"
    assert key_finding(1, 11, "N/A") is not None


def test_channels_in_the_importers_form_are_no_finding() -> None:
    assert channel_finding(1, 10, 5, Channel.PHONE, "+551133334444") is None
    assert channel_finding(1, 10, 5, Channel.EMAIL, "Ana@exemplo.com") is None  # local part kept
    assert channel_finding(1, 10, 5, Channel.JOURNEY, "anything") is None


def test_unnormalized_channels_carry_the_importers_form() -> None:
    phone = channel_finding(1, 10, 5, Channel.PHONE, "(11) 3333-4444")
    assert phone is not None
    assert (phone.kind, phone.normal_form, phone.detail_id) == (
        Finding.UNNORMALIZED_CHANNEL,
        "+551133334444",
        5,
    )
    email = channel_finding(1, 10, 6, Channel.EMAIL, "Ana@Exemplo.com")
    assert email is not None
    assert email.normal_form == "Ana@exemplo.com"
    junk = channel_finding(1, 10, 7, Channel.WHATSAPP, "12")
    assert junk is not None
    assert junk.normal_form is None
    assert "not a valid value" in junk.reason


def test_cells_are_formula_safe_and_documents_complete() -> None:
    found = duplicate(3, A, [20, 10], ["=HYPERLINK(1)", A])
    assert found.reason.endswith("the oldest is 10")
    cells = found.cells()
    assert cells[4].startswith("'=")
    assert found.document()["contact_ids"] == [20, 10]

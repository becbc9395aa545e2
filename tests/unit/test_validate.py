"""Header mapping, layouts and the row builder (pure)."""

from __future__ import annotations

import pytest

from importer.exceptions import FileRejectedError, LayoutError
from importer.models import Attribute, Channel, Reason, Severity
from importer.validate import (
    Layout,
    RowBuilder,
    Target,
    header_key,
    parse_layout,
    plan_for_header,
    plan_for_keys,
    plan_for_positions,
)
from tests.support import cpf

KEY = cpf(42)


@pytest.mark.parametrize(
    ("header", "target"),
    [
        ("Nome", Target(attribute=Attribute.NAME)),
        ("  CPF  ", Target(attribute=Attribute.CPF_CNPJ)),
        ("CPF/CNPJ", Target(attribute=Attribute.CPF_CNPJ)),
        ("cpf_cnpj", Target(attribute=Attribute.CPF_CNPJ)),
        ("E-mail", Target(channel=Channel.EMAIL)),
        ("e mail", Target(channel=Channel.EMAIL)),
        ("Endereço", Target(attribute=Attribute.STREET_ADDRESS)),
        ("TELEFONE", Target(channel=Channel.PHONE)),
        ("WhatsApp", Target(channel=Channel.WHATSAPP)),
        ("Plano", Target(custom="Plano")),
    ],
)
def test_header_aliases(header: str, target: Target) -> None:
    is_key = target.attribute is Attribute.CPF_CNPJ
    plan = plan_for_header([header] if is_key else ["cpf", header], None, 64)
    assert plan.columns[-1].target == target


def test_header_key_folds_case_space_and_accents() -> None:
    assert header_key("  Endereço Completo ") == "endereco_completo"


def test_missing_and_duplicate_columns_reject_the_file() -> None:
    with pytest.raises(FileRejectedError) as missing:
        plan_for_header(["nome", "email"], None, 64)
    assert missing.value.reason is Reason.MISSING_REQUIRED_COLUMN
    with pytest.raises(FileRejectedError) as dup:
        plan_for_header(["cpf", "Email", " EMAIL"], None, 64)
    assert dup.value.reason is Reason.DUPLICATE_COLUMN
    with pytest.raises(FileRejectedError) as two_keys:
        plan_for_header(["cpf", "cnpj"], None, 64)
    assert two_keys.value.reason is Reason.DUPLICATE_COLUMN
    with pytest.raises(FileRejectedError) as wide:
        plan_for_header(["cpf", *map(str, range(70))], None, 64)
    assert wide.value.reason is Reason.TOO_MANY_COLUMNS


def test_row_builder_normalizes_and_warns() -> None:
    plan = plan_for_header(["nome", "cpf", "email", "celular", "plano"], None, 64)
    builder = RowBuilder(plan, international=False, max_value_chars=10)
    row, issues = builder.build(5, ["  Ana  ", f" {KEY} ", "bad", "(11) 91234-5678", ""])
    assert row is not None
    assert (row.line, row.cpf_cnpj, row.name) == (5, KEY, "Ana")
    assert [(d.channel, d.value) for d in row.details] == [(Channel.PHONE, "+5511912345678")]
    assert row.custom_fields == ()
    assert [(i.reason, i.severity, i.column) for i in issues] == [
        (Reason.INVALID_EMAIL, Severity.WARNING, "email")
    ]


def test_row_builder_invalid_rows() -> None:
    plan = plan_for_header(["nome", "cpf"], None, 64)
    builder = RowBuilder(plan, international=False, max_value_chars=100)
    assert builder.build(2, ["Ana", ""])[1][0].reason is Reason.MISSING_CPF_CNPJ
    assert builder.build(2, ["Ana", "123"])[1][0].reason is Reason.INVALID_CPF
    assert builder.build(2, ["Ana"])[1][0].reason is Reason.TOO_FEW_FIELDS
    assert builder.build(2, ["Ana", KEY, "x"])[1][0].reason is Reason.TOO_MANY_FIELDS
    row, issues = builder.build(2, ["A" * 101, KEY])
    assert row is not None
    assert row.name is None
    assert issues[0].reason is Reason.VALUE_TOO_LONG


def test_sql_looking_values_stay_text() -> None:
    plan = plan_for_header(["nome", "cpf", "obs"], None, 64)
    builder = RowBuilder(plan, international=False, max_value_chars=100)
    row, _ = builder.build(2, ["\\N", KEY, "=SUM(A1);DROP TABLE contact"])
    assert row is not None
    assert row.name == "\\N"
    assert row.custom_fields == (("obs", "=SUM(A1);DROP TABLE contact"),)


def test_layout_maps_by_name_and_position() -> None:
    layout = parse_layout(
        {
            "columns": {
                "Doc": "cpf_cnpj",
                "Zap": "whatsapp",
                "X": "ignore",
                "Seg": "custom:Segmento",
            },
            "delimiter": ";",
        }
    )
    plan = plan_for_header(["Doc", "Zap", "X", "Seg", "nome"], layout, 64)
    targets = {c.name: c.target for c in plan.columns}
    assert targets == {
        "Doc": Target(attribute=Attribute.CPF_CNPJ),
        "Zap": Target(channel=Channel.WHATSAPP),
        "Seg": Target(custom="Segmento"),
        "nome": Target(attribute=Attribute.NAME),
    }
    positional = parse_layout(
        {
            "header": False,
            "columns": [{"column": 1, "target": "cpf_cnpj"}, {"column": "0", "target": "name"}],
        }
    )
    plan = plan_for_positions(3, positional)
    assert [c.index for c in plan.columns] == [1, 0]
    assert plan.field_count == 3


@pytest.mark.parametrize(
    "document",
    [
        {"columns": [{"column": "a", "target": "nonsense"}]},
        {"columns": [{"column": -1, "target": "name"}]},
        {"delimiter": "x"},
        {"header": "yes"},
        {"columns": 3},
        {"unmapped": "maybe"},
    ],
)
def test_bad_layouts_are_refused(document: dict[str, object]) -> None:
    with pytest.raises(LayoutError):
        parse_layout(document)


def test_unmapped_ignore_keeps_aliases_only() -> None:
    layout = Layout(unmapped_as_custom=False)
    plan = plan_for_header(["cpf", "nome", "plano"], layout, 64)
    assert [c.name for c in plan.columns] == ["cpf", "nome"]


def test_jsonl_keys_plan() -> None:
    plan = plan_for_keys(["documento", "Nome", "extra"], None)
    assert plan.field_count is None
    assert plan.custom_names == ("extra",)

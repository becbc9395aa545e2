"""Header mapping, layouts and the row builder (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.generate import generate
from importer.core import rows
from importer.core.errors import FileRejectedError, LayoutError
from importer.core.layout import (
    Layout,
    LayoutColumn,
    RowPlan,
    Target,
    header_key,
    parse_layout,
    plan_for_header,
    plan_for_keys,
    plan_for_positions,
)
from importer.core.models import (
    Attribute,
    Channel,
    ContactRow,
    Detail,
    Reason,
    RowIssue,
    Severity,
    new_contact_row,
    new_detail,
    slot_setters,
)
from importer.core.normalize import (
    normalize_cpf_cnpj,
    normalize_email,
    normalize_phone,
    normalize_phone_parts,
)
from importer.core.rows import RowBuilder
from importer.read.csvfile import CsvReader
from importer.read.sniff import sniff
from tests.support import bad_cpf, cpf

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


@pytest.mark.parametrize(
    ("document", "field", "words"),
    [
        ({"delimeter": ";"}, "layout.delimeter", "did you mean 'delimiter'"),
        ({"colums": {"Doc": "cpf_cnpj"}}, "layout.colums", "did you mean 'columns'"),
        ({"separator": ";"}, "layout.separator", "known: columns, delimiter"),
        ({"columns": [{"column": 0, "taget": "name"}]}, "layout.columns.0.taget", "'target'"),
        ({"columns": {"Zap": "whatsap"}}, "layout.columns.Zap", "did you mean 'whatsapp'"),
        ({"columns": [{"column": 1, "target": "nome"}]}, "layout.columns.0", "unknown layout"),
        ({"encoding": "utf8x"}, "layout.encoding", "not a known character set"),
        ({"delimiter": "x"}, "layout.delimiter", "one of"),
    ],
)
def test_misspelt_layouts_are_refused_by_name(
    document: dict[str, object], field: str, words: str
) -> None:
    """A misspelt key, an unknown target or charset is refused, naming the part at fault."""
    with pytest.raises(LayoutError) as refused:
        parse_layout(document)
    assert refused.value.field == field
    assert words in str(refused.value)


def test_every_known_layout_key_is_accepted() -> None:
    layout = parse_layout(
        {
            "columns": [],
            "delimiter": ";",
            "encoding": "cp1252",
            "header": True,
            "unmapped": "ignore",
        }
    )
    assert layout.delimiter == ";"
    assert layout.encoding == "cp1252"


def test_unmapped_ignore_keeps_aliases_only() -> None:
    layout = Layout(unmapped_as_custom=False)
    plan = plan_for_header(["cpf", "nome", "plano"], layout, 64)
    assert [c.name for c in plan.columns] == ["cpf", "nome"]


def test_jsonl_keys_plan() -> None:
    plan = plan_for_keys(["documento", "Nome", "extra"], None)
    assert plan.field_count is None
    assert plan.custom_names == ("extra",)


def test_whatsapp_equal_to_the_phone_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def counting(raw: str, *, international: bool = False) -> object:
        calls.append(raw)
        return normalize_phone_parts(raw, international=international)

    monkeypatch.setattr(rows, "normalize_phone_parts", counting)
    plan = plan_for_header(["cpf", "celular", "whatsapp", "telefone"], None, 64)
    builder = RowBuilder(plan, international=False, max_value_chars=100)
    row, issues = builder.build(2, [KEY, "(11) 91234-5678", " (11) 91234-5678 ", "21 3456 7890"])
    assert calls == ["(11) 91234-5678", "21 3456 7890"]
    assert row is not None
    assert [(d.channel, d.value) for d in row.details] == [
        (Channel.PHONE, "+5511912345678"),
        (Channel.WHATSAPP, "+5511912345678"),
        (Channel.PHONE, "+552134567890"),
    ]
    assert issues == []
    builder.build(3, [KEY, "(11) 91234-5678", "(11) 91234-5678", ""])
    assert calls[2:] == ["(11) 91234-5678"]  # a row reuses its own results only
    _, issues = builder.build(4, [KEY, "123", "123", ""])
    assert [(i.column, i.reason) for i in issues] == [
        ("celular", Reason.INVALID_PHONE),
        ("whatsapp", Reason.INVALID_PHONE),
    ]


def test_issues_follow_the_column_order_with_a_missing_key_first() -> None:
    layout = parse_layout(
        {
            "header": False,
            "columns": [
                {"column": 3, "target": "custom:Obs"},
                {"column": 1, "target": "email"},
                {"column": 0, "target": "name"},
                {"column": 1, "target": "phone"},
                {"column": 2, "target": "cpf_cnpj"},
            ],
        }
    )
    builder = RowBuilder(plan_for_positions(4, layout), international=False, max_value_chars=5)
    row, issues = builder.build(7, ["Ana Maria", "bad", "", "too long"])
    assert row is None
    assert [(i.column, i.reason) for i in issues] == [
        ("column_3", Reason.MISSING_CPF_CNPJ),
        ("column_4", Reason.VALUE_TOO_LONG),
        ("column_2", Reason.INVALID_EMAIL),
        ("column_1", Reason.VALUE_TOO_LONG),
        ("column_2", Reason.INVALID_PHONE),
    ]


def test_a_short_jsonl_record_lacks_its_last_values() -> None:
    builder = RowBuilder(
        plan_for_keys(["nome", "cpf", "email"], None), international=False, max_value_chars=99
    )
    row, issues = builder.build(4, ["Ana"])
    assert row is None
    assert [(i.column, i.reason) for i in issues] == [("cpf_cnpj", Reason.MISSING_CPF_CNPJ)]
    row, issues = builder.build(5, ["Ana", KEY])
    assert row == ContactRow(5, KEY, "Ana", None)
    assert issues == []


def test_fast_constructors_make_the_same_objects() -> None:
    detail = new_detail(Channel.PHONE, "+5511912345678", 55, "BR")
    assert detail == Detail(Channel.PHONE, "+5511912345678", 55, "BR")
    assert new_detail(Channel.EMAIL, "a@b.com") == Detail(Channel.EMAIL, "a@b.com")
    row = new_contact_row(3, KEY, "Ana", None, (detail,), (("plano", "p"),))
    assert row == ContactRow(3, KEY, "Ana", None, (detail,), (("plano", "p"),))
    assert type(row) is ContactRow
    assert repr(row) == repr(ContactRow(3, KEY, "Ana", None, (detail,), (("plano", "p"),)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.name = "Bia"  # type: ignore[misc]


def test_fast_constructors_refuse_a_changed_model() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Wider:
        channel: Channel
        value: str
        country_code: int | None = None
        country: str | None = None
        extra: str | None = None

    with pytest.raises(RuntimeError):
        slot_setters(Wider, ("channel", "value", "country_code", "country"))


# --------------------------------------------------------------------------------------
# RowBuilder against a plain implementation of its rules (one column at a time, in
# order): the builder's hot path is restructured for speed, its results are not.
# --------------------------------------------------------------------------------------


def reference_build(
    plan: RowPlan, line: int, fields: Sequence[str], *, international: bool, max_value: int
) -> tuple[ContactRow | None, list[RowIssue]]:
    expected = plan.field_count
    if expected is not None and len(fields) != expected:
        reason = Reason.TOO_MANY_FIELDS if len(fields) > expected else Reason.TOO_FEW_FIELDS
        detail = f"{len(fields)} fields, header has {expected}"
        return None, [RowIssue(line, None, reason, detail, Severity.INVALID)]
    key: str | Reason | None = None
    name = street_address = None
    details: list[Detail] = []
    custom: list[tuple[str, str]] = []
    issues: list[RowIssue] = []

    def warn(column: str, reason: Reason, value: str) -> None:
        issues.append(RowIssue(line, column, reason, value[:1024], Severity.WARNING))

    for column in plan.columns:
        value = fields[column.index].strip() if column.index < len(fields) else ""
        target = column.target
        if not value:
            continue
        if target.attribute is Attribute.CPF_CNPJ:
            key = normalize_cpf_cnpj(value)
            if isinstance(key, Reason):
                issues.append(RowIssue(line, column.name, key, value, Severity.INVALID))
        elif target.attribute is not None:
            if len(value) > max_value:
                warn(column.name, Reason.VALUE_TOO_LONG, value)
            elif target.attribute is Attribute.NAME:
                name = value
            else:
                street_address = value
        elif target.channel is Channel.EMAIL:
            email = normalize_email(value) if len(value) <= 320 else None
            if email is None:
                warn(column.name, Reason.INVALID_EMAIL, value)
            else:
                details.append(Detail(Channel.EMAIL, email))
        elif target.channel in (Channel.PHONE, Channel.WHATSAPP):
            phone = normalize_phone(value, international=international)
            if phone is None:
                warn(column.name, Reason.INVALID_PHONE, value)
            else:
                details.append(
                    Detail(target.channel, phone.e164, phone.country_code, phone.country)
                )
        elif target.channel is Channel.JOURNEY:
            if len(value) > 320:
                warn(column.name, Reason.VALUE_TOO_LONG, value)
            else:
                details.append(Detail(Channel.JOURNEY, value))
        elif target.custom is not None:
            if len(value) > max_value:
                warn(column.name, Reason.VALUE_TOO_LONG, value)
            else:
                custom.append((target.custom, value))
    if key is None:
        key = Reason.MISSING_CPF_CNPJ
        key_column = "cpf_cnpj"
        if plan.field_count is not None:
            key_column = next(
                c.name for c in plan.columns if c.target.attribute is Attribute.CPF_CNPJ
            )
        issues.insert(0, RowIssue(line, key_column, key, None, Severity.INVALID))
    if isinstance(key, Reason):
        return None, issues
    row = ContactRow(line, key, name, street_address, tuple(details), tuple(custom))
    return row, issues


def assert_same_as_reference(
    plan: RowPlan, records: Sequence[tuple[int, Sequence[str]]], international: bool, limit: int
) -> None:
    builder = RowBuilder(plan, international=international, max_value_chars=limit)
    for line, fields in records:
        got = builder.build(line, fields)
        want = reference_build(plan, line, fields, international=international, max_value=limit)
        assert got == want
        assert repr(got) == repr(want)  # the same types too: Reason, not str


@pytest.mark.parametrize(("international", "limit"), [(False, 4096), (True, 4096), (False, 24)])
def test_row_builder_matches_the_reference_on_a_generated_file(
    tmp_path: Path, international: bool, limit: int
) -> None:
    path = tmp_path / "contacts.csv"
    generate(600, 11, path, write_meta=False)
    data = path.read_bytes()
    reader = CsvReader(sniff(data))
    header, *body = reader.feed(data) + reader.finish()
    assert header.fields is not None
    records = [(r.line, r.fields) for r in body if r.fields is not None]
    assert len(records) == 600
    plan = plan_for_header(header.fields, None, 512)
    assert_same_as_reference(plan, records, international, limit)


PHONE_VALUES = ["(11) 91234-5678", "+55 11 91234-5678", "11912345678", "(20) 91234-5678"]
PHONE_VALUES += ["0800 123 4567", "+1 650 253 0000", "não tem", "123", "9" * 70]
VALUES = [
    "",
    "  ",
    cpf(7),
    f" {cpf(8)[:3]}.{cpf(8)[3:6]}.{cpf(8)[6:9]}-{cpf(8)[9:]} ",
    bad_cpf(9),
    "11.222.333/0001-81",
    "12ABC34501DE35",
    "191",
    "abc",
    "Ana Maria",
    " São Paulo ",
    "x" * 40,
    "y" * 400,
    "a@b.com.br",
    "Maria@Example.COM",
    "bad@",
    "a@host.test",
    "z" * 330 + "@a.com",
    *PHONE_VALUES,
]
TARGETS = [
    *(Target(attribute=a) for a in Attribute),
    *(Target(channel=c) for c in Channel),
    Target(custom="plano"),
    Target(custom="obs"),
    None,
]
HEADER_NAMES = ["nome", "cpf", "email", "celular", "whatsapp", "telefone", "endereco"]
HEADER_NAMES += ["jornada", "plano", "obs", ""]


@st.composite
def plans(draw: st.DrawFn) -> RowPlan:
    """Header, positional-layout and JSONL plans; positions out of order or repeated."""
    kind = draw(st.sampled_from(["header", "positions", "keys"]))
    if kind == "header":
        names = draw(st.lists(st.sampled_from(HEADER_NAMES), min_size=1, max_size=9, unique=True))
        if "cpf" not in names:
            names.insert(draw(st.integers(0, len(names))), "cpf")
        return plan_for_header(names, None, 64)
    if kind == "keys":
        names = draw(st.lists(st.sampled_from(HEADER_NAMES[:-1]), max_size=8, unique=True))
        return plan_for_keys(names, None)
    width = draw(st.integers(1, 6))
    targets = draw(st.lists(st.sampled_from(TARGETS), min_size=1, max_size=9))
    unique = list(dict.fromkeys(t for t in targets if t is None or t.attribute is None))
    attributes = list(dict.fromkeys(t for t in targets if t is not None and t.attribute))
    key = Target(attribute=Attribute.CPF_CNPJ)
    chosen = [*attributes, *unique] if key in attributes else [key, *attributes, *unique]
    columns = tuple(
        LayoutColumn(draw(st.integers(0, width - 1)), target)
        for target in draw(st.permutations(chosen))
    )
    return plan_for_positions(width, Layout(columns=columns, has_header=False))


@st.composite
def records(draw: st.DrawFn, plan: RowPlan) -> list[tuple[int, list[str]]]:
    width = plan.field_count or len(plan.columns)
    out = []
    for line in range(2, draw(st.integers(1, 8)) + 2):
        size = draw(st.sampled_from([width] * 8 + [max(width - 1, 0), width + 1]))
        fields = draw(st.lists(st.sampled_from(VALUES), min_size=size, max_size=size))
        if size >= 2 and draw(st.booleans()):  # a value repeated, as whatsapp repeats a phone
            fields[draw(st.integers(0, size - 1))] = fields[draw(st.integers(0, size - 1))]
        out.append((line, fields))
    return out


@settings(max_examples=400, deadline=None)
@given(st.data(), plans(), st.booleans(), st.sampled_from([8, 50, 4096]))
def test_row_builder_matches_the_reference(
    data: st.DataObject, plan: RowPlan, international: bool, limit: int
) -> None:
    assert_same_as_reference(plan, data.draw(records(plan)), international, limit)

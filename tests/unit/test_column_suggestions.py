"""The columns step's suggesters (issue 29): the header words, the value shapes, the memory and
the custom fields, their order, the conflicts between columns, and the mapping a user sets.

The labeled corpus (``tests/fixtures/column_headers.json``) measures the top suggestion:
at least 95% right without memory, 100% for a header the client mapped before.
"""

from __future__ import annotations

import datetime as dt
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_columns import accuracy, load_corpus
from importer.core.columns import (
    ClientColumns,
    ColumnTarget,
    CustomField,
    MemoryEntry,
    SampledColumn,
    SuggestionReason,
    import_targets,
    mapping_layout,
    memory_of,
    parse_mapping,
    remembered,
    suggest,
    suggest_all,
)
from importer.core.errors import CustomFieldNotFoundError, InvalidRequestError
from importer.core.headers import TargetKind, match_header, says_nothing
from importer.core.layout import header_key, parse_layout, plan_for_header
from importer.core.shapes import match_values
from tests.support import cpf

FIELDS = ClientColumns((CustomField(7, "Plano"), CustomField(8, "Data de nascimento")))
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def kind_of(header: str, *values: str, known: ClientColumns = FIELDS) -> TargetKind:
    return suggest(SampledColumn(0, header, values), known).target.kind


# --- the corpus -----------------------------------------------------------------------------------


def test_the_corpus_is_large_and_varied() -> None:
    corpus = load_corpus()
    distinct = {(h.header, h.target, h.samples) for h in corpus.headers}
    assert len(distinct) >= 200  # the same header in two exports counts once here
    origins = {h.origin for h in corpus.headers}
    assert {"hubspot", "rdstation", "mailchimp", "excel", "crm-en", "values"} <= origins
    targets = {h.target.partition(":")[0] for h in corpus.headers}
    assert targets == {k.value for k in TargetKind}


def test_top_suggestion_is_right_for_at_least_95_percent_without_memory() -> None:
    measured = accuracy(load_corpus(), memory=False)
    assert measured.share >= 0.95, measured.misses


def test_a_header_mapped_before_is_always_suggested_as_mapped() -> None:
    measured = accuracy(load_corpus(), memory=True)
    assert measured.share == 1.0, measured.misses


# --- the header words -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "kind"),
    [
        ("CPF/CNPJ", TargetKind.CPF_CNPJ),
        ("Celular", TargetKind.PHONE),
        ("Telefone com DDD", TargetKind.PHONE),
        ("WhatsApp", TargetKind.WHATSAPP),
        ("Celular (WhatsApp)", TargetKind.WHATSAPP),
        ("E-mail", TargetKind.EMAIL),
        ("Endereço de e-mail", TargetKind.EMAIL),
        ("Nome completo", TargetKind.NAME),
        ("Endereço", TargetKind.STREET_ADDRESS),
        ("Jornada", TargetKind.JOURNEY),
    ],
)
def test_header_words_name_their_target(header: str, kind: TargetKind) -> None:
    match = match_header(header)
    assert match is not None
    assert match.kind is kind


@pytest.mark.parametrize(
    "header", ["Email Opt Out", "IP Address", "Last Name", "Nome da empresa", "Ramal", "Número"]
)
def test_words_that_say_something_else_win(header: str) -> None:
    assert match_header(header) is None


@pytest.mark.parametrize("header", ["", "Coluna 3", "Column7", "Unnamed: 4", "campo_2", " 12 "])
def test_placeholder_headers_say_nothing(header: str) -> None:
    assert says_nothing(header)
    assert kind_of(header, "sim", "não") is TargetKind.IGNORE  # never a junk custom field


def _variants(text: str) -> st.SearchStrategy[str]:
    """The same header as exports write it: case, accents dropped, separators changed."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    spelled = st.sampled_from([text, bare, text.upper(), text.lower(), text.title()])
    separator = st.sampled_from([" ", "_", "-", "  ", "."])
    return st.tuples(spelled, separator).map(lambda p: p[0].replace(" ", p[1]))


HEADERS = ["Nome completo", "Telefone com DDD", "Endereço", "CPF ou CNPJ", "Número WhatsApp"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(HEADERS).flatmap(lambda h: st.tuples(st.just(h), _variants(h))))
def test_case_accents_and_separators_do_not_change_the_suggestion(pair: tuple[str, str]) -> None:
    original, variant = pair
    assert kind_of(variant) is kind_of(original)


# --- the value shapes -----------------------------------------------------------------------------


def test_values_decide_for_a_header_that_says_nothing() -> None:
    keys = [cpf(10 + i) for i in range(4)] + ["", "sem documento"]
    shape = match_values(keys)
    assert shape is not None
    assert (shape.kind, shape.share, shape.values) == (TargetKind.CPF_CNPJ, 0.8, 5)
    suggestion = suggest(SampledColumn(2, "Coluna 3", tuple(keys)), FIELDS)
    assert suggestion.reason is SuggestionReason.VALUES
    assert suggestion.share == 0.8
    assert kind_of("Col", "ana@example.com", "bia@example.org") is TargetKind.EMAIL
    assert kind_of("Col", "(11) 98765-4321", "21 3456-7890") is TargetKind.PHONE


def test_too_few_or_too_mixed_values_decide_nothing() -> None:
    assert match_values([cpf(1)]) is None
    assert match_values([cpf(1), "a", "b", "c"]) is None
    assert match_values(["", " "]) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=20))
def test_a_shape_share_is_a_share_of_the_present_values(values: list[str]) -> None:
    shape = match_values(values)
    if shape is not None:
        assert 0.6 <= shape.share <= 1.0
        assert shape.values == sum(1 for v in values if v.strip())


# --- the sources in order -------------------------------------------------------------------------


def test_memory_comes_first_then_aliases_then_fields() -> None:
    known = ClientColumns(FIELDS.custom_fields, {"celular": "whatsapp", "obs": "custom:plano"})
    first = suggest(SampledColumn(0, "Celular"), known)
    assert (first.target.kind, first.reason) == (TargetKind.WHATSAPP, SuggestionReason.MEMORY)
    remembered_field = suggest(SampledColumn(0, "OBS"), known).target
    assert remembered_field == ColumnTarget(TargetKind.CUSTOM_FIELD, 7, "Plano")
    field = suggest(SampledColumn(0, "DATA DE NASCIMENTO"), FIELDS)
    assert field.reason is SuggestionReason.CUSTOM_FIELD
    assert field.target == ColumnTarget(TargetKind.CUSTOM_FIELD, 8, "Data de nascimento")
    new = suggest(SampledColumn(0, "Segmento"), FIELDS)
    assert new.target == ColumnTarget(TargetKind.NEW_CUSTOM_FIELD, None, "Segmento")
    assert new.reason is SuggestionReason.UNMATCHED


def test_the_memory_keeps_the_most_used_target_of_a_header() -> None:
    entries = [
        MemoryEntry("fone", "phone", 3, NOW),
        MemoryEntry("fone", "whatsapp", 5, NOW - dt.timedelta(days=9)),
        MemoryEntry("zap", "whatsapp", 1, NOW),
        MemoryEntry("zap", "phone", 1, NOW - dt.timedelta(days=1)),
    ]
    assert memory_of(entries) == {"fone": "whatsapp", "zap": "whatsapp"}


HEADER_TEXT = st.text(st.characters(codec="utf-8"), max_size=25) | st.sampled_from(
    [*HEADERS, "Nome", "Nome", "CPF", "Documento", "Plano", "plano", ""]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(HEADER_TEXT, st.lists(st.text(max_size=15), max_size=6)), max_size=12),
    st.dictionaries(
        st.sampled_from(["nome", "cpf", "plano", "x"]),
        st.sampled_from(
            ["name", "cpf_cnpj", "custom:Plano", "custom:Outro", "ignore", "phone", "bogus"]
        ),
    ),
)
def test_no_two_columns_get_one_attribute_or_field_and_confidence_is_a_share(
    columns: list[tuple[str, list[str]]], memory: dict[str, str]
) -> None:
    known = ClientColumns(FIELDS.custom_fields, memory)
    sampled = [SampledColumn(i, h, tuple(v)) for i, (h, v) in enumerate(columns)]
    views = suggest_all(sampled, known)
    slots = [v.suggestion.target.slot() for v in views]
    taken = [s for s in slots if s is not None]
    assert len(taken) == len(set(taken))
    for view in views:
        assert 0.0 <= view.suggestion.confidence <= 1.0
        assert len(view.column.samples) <= 5
        assert not any(s.startswith(("=", "+", "-", "@")) for s in view.column.samples)


def test_the_more_confident_column_keeps_an_attribute() -> None:
    views = suggest_all([SampledColumn(0, "Nome do titular"), SampledColumn(1, "Nome")], FIELDS)
    assert views[1].suggestion.target.kind is TargetKind.NAME
    assert views[0].suggestion.target.kind is TargetKind.NEW_CUSTOM_FIELD


# --- the mapping a user sets ----------------------------------------------------------------------

HEADER = ("Nome", "Documento", "Fone", "Plano", "")


def test_a_mapping_becomes_the_layout_and_the_memory_pairs() -> None:
    body = {
        "columns": [
            {"position": 1, "target": "cpf_cnpj"},
            {"position": 0, "target": "name"},
            {"position": 2, "target": "whatsapp"},
            {"position": 3, "target": "custom_field", "custom_field_id": 7},
            {"position": 4, "target": "new_custom_field", "name": "Extra"},
        ]
    }
    choices = parse_mapping(body, HEADER, FIELDS)
    layout = mapping_layout(choices, HEADER, {"delimiter": ";", "columns": [], "key": "cpf_cnpj"})
    assert layout == {
        "delimiter": ";",
        "key": "cpf_cnpj",
        "columns": [
            {"column": "Nome", "target": "name"},
            {"column": "Documento", "target": "cpf_cnpj"},
            {"column": "Fone", "target": "whatsapp"},
            {"column": "Plano", "target": "custom:Plano"},
            {"column": 4, "target": "custom:Extra"},
        ],
        "unmapped": "ignore",
    }
    plan = plan_for_header(HEADER, parse_layout(layout), 512)
    assert [(c.index, c.target.custom) for c in plan.columns][3:] == [(3, "Plano"), (4, "Extra")]
    assert remembered(choices, HEADER) == [
        ("documento", "cpf_cnpj"),
        ("fone", "whatsapp"),
        ("nome", "name"),
        ("plano", "custom:Plano"),
    ]
    shown = import_targets(parse_layout(layout), HEADER, FIELDS)
    assert shown[2] == ColumnTarget(TargetKind.WHATSAPP)
    assert shown[4] == ColumnTarget(TargetKind.NEW_CUSTOM_FIELD, None, "Extra")


def test_without_a_mapping_the_import_goes_by_its_aliases_not_the_suggestions() -> None:
    header = ("Nome", "Coluna 2", "Celular", "Plano", "", "importer_error")
    assert import_targets(None, header, FIELDS) == [
        ColumnTarget(TargetKind.NAME),
        ColumnTarget(TargetKind.NEW_CUSTOM_FIELD, None, "Coluna 2"),  # suggested: its values
        ColumnTarget(TargetKind.PHONE),
        ColumnTarget(TargetKind.CUSTOM_FIELD, 7, "Plano"),
        ColumnTarget(TargetKind.IGNORE),
        ColumnTarget(TargetKind.IGNORE),
    ]
    ignoring = parse_layout({"columns": {"Coluna 2": "cpf_cnpj"}, "unmapped": "ignore"})
    kinds = [t.kind for t in import_targets(ignoring, header, FIELDS)]
    # "unmapped": "ignore" drops the custom fields only: aliases still map (hence a mapping
    # set in the columns step names every column)
    assert kinds[:4] == [TargetKind.NAME, TargetKind.CPF_CNPJ, TargetKind.PHONE, TargetKind.IGNORE]


def test_a_mapping_names_every_column_so_no_alias_maps_one_left_out() -> None:
    header = ("Nome", "CPF", "Celular")
    choices = parse_mapping({"columns": [{"position": 1, "target": "cpf_cnpj"}]}, header, FIELDS)
    layout = parse_layout(mapping_layout(choices, header, None))
    assert [t.kind for t in import_targets(layout, header, FIELDS)] == [
        TargetKind.IGNORE,
        TargetKind.CPF_CNPJ,
        TargetKind.IGNORE,
    ]
    assert [c.index for c in plan_for_header(header, layout, 512).columns] == [1]


def test_bad_mappings_name_every_field_at_fault() -> None:
    body = {
        "columns": [
            {"position": 0, "target": "name"},
            {"position": 2, "target": "name"},
            {"position": 9, "target": "phone"},
            {"position": 1, "target": "cpf"},
            {"position": 3, "target": "custom_field"},
            {"position": 4, "target": "new_custom_field"},
            {"position": 0, "target": "ignore", "colour": "red"},
        ],
        "extra": 1,
    }
    with pytest.raises(InvalidRequestError) as refused:
        parse_mapping(body, HEADER, FIELDS)
    assert [field for field, _ in refused.value.problems] == [
        "extra",
        "columns.2.position",
        "columns.3.target",
        "columns.4.custom_field_id",
        "columns.5.name",
        "columns.6.colour",
        "columns.1.target",
        "columns.2.position",
    ]
    with pytest.raises(InvalidRequestError):
        parse_mapping({"columns": "all"}, HEADER, FIELDS)


def test_another_tenants_field_is_not_found() -> None:
    body = {"columns": [{"position": 3, "target": "custom_field", "custom_field_id": 99}]}
    with pytest.raises(CustomFieldNotFoundError):
        parse_mapping(body, HEADER, FIELDS)


def test_header_keys_fold_what_the_memory_is_keyed_by() -> None:
    assert header_key(" Telefone  com DDD ") == header_key("telefone_com_ddd") == "telefone_com_ddd"

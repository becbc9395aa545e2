"""Keys written by others (issue 25, §2): a stored CPF/CNPJ another component formatted
('529.982.247-25', lower-case letters, lost leading zeros) is found by its normal form, so no
import creates a second live contact of one client for one key; legacy duplicates stop the
migration, named; an interrupted index build is rebuilt."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.adapters.postgres.pool import migrate
from importer.core.errors import MigrationBlockedError
from importer.core.models import ConflictStrategy, JobStatus, Reason
from importer.core.normalize import normalize_cpf_cnpj
from tests.support import cpf, fetch, import_file, write_csv

pytestmark = pytest.mark.integration

HEADER = ["nome", "cpf", "email"]
CLIENT = 41
A, B = cpf(4101), cpf(4102)
CNPJ = "12ABC34501DE35"  # an alphanumeric CNPJ (valid check digits)
ZEROS = cpf(1)  # 00000000191: a spreadsheet stored it as 191


def formatted(key: str) -> str:
    return f"{key[:3]}.{key[3:6]}.{key[6:9]}-{key[9:]}"


async def store(dsn: str, client_id: int, key: str, name: str, *, deleted: bool = False) -> int:
    """A contact written by another component: its key as that component spelled it."""
    rows = await fetch(
        dsn,
        "INSERT INTO contact (client_id, name, cpf_cnpj, deleted_at) "
        "VALUES ($1, $2, $3, CASE WHEN $4 THEN now() END) RETURNING id",
        client_id,
        name,
        key,
        deleted,
    )
    return int(rows[0]["id"])


async def live_contacts(dsn: str, client_id: int) -> list[asyncpg.Record]:
    return await fetch(
        dsn,
        "SELECT id, name, cpf_cnpj FROM contact WHERE client_id = $1 AND deleted_at IS NULL "
        "ORDER BY id",
        client_id,
    )


@pytest.mark.parametrize("strategy", [ConflictStrategy.MERGE, ConflictStrategy.DISCARD])
async def test_a_formatted_stored_key_is_the_files_key(
    db_dsn: str, tmp_path: Path, strategy: ConflictStrategy
) -> None:
    ids = {
        A: await store(db_dsn, CLIENT, formatted(A), "Ana (CRM)"),
        CNPJ: await store(db_dsn, CLIENT, CNPJ.lower(), "Acme (CRM)"),
        ZEROS: await store(db_dsn, CLIENT, ZEROS.lstrip("0"), "Zero (legacy)"),
    }
    await store(db_dsn, CLIENT, formatted(B), "Bruno (deleted)", deleted=True)
    path = write_csv(
        tmp_path / "k.csv",
        HEADER,
        [
            ["Ana", A, "ana@example.com.br"],
            ["Acme", CNPJ, ""],
            ["Zero", ZEROS, ""],
            ["Bruno", B, ""],
        ],
    )
    outcome = await import_file(db_dsn, path, CLIENT, strategy)
    assert outcome.status is JobStatus.COMPLETED, outcome
    c = outcome.counters
    merged = strategy is ConflictStrategy.MERGE
    assert (c.inserted, c.updated, c.ignored) == ((1, 3, 0) if merged else (1, 0, 3))
    live = await live_contacts(db_dsn, CLIENT)
    assert len(live) == 4  # B's deleted contact stays deleted: a new one is made for B
    by_id = {r["id"]: r for r in live}
    names = {A: "Ana", CNPJ: "Acme", ZEROS: "Zero"}
    for key, contact_id in ids.items():  # the stored contacts, updated (MERGE) or kept
        name = by_id[contact_id]["name"]
        assert name == names[key] if merged else name.endswith(")"), (key, name)
    assert by_id[ids[A]]["cpf_cnpj"] == formatted(A), "the stored spelling is left as it is"


async def test_a_preview_counts_formatted_stored_keys_as_stored(
    db_dsn: str, tmp_path: Path
) -> None:
    await store(db_dsn, CLIENT, formatted(A), "Ana (CRM)")
    path = write_csv(tmp_path / "p.csv", HEADER, [["Ana", A, ""], ["Bruno", B, ""]])
    preview = await import_file(db_dsn, path, CLIENT, preview=True)
    assert preview.status is JobStatus.READY
    assert preview.preview is not None
    counters = preview.preview["counters"]
    assert isinstance(counters, dict)
    assert (counters["inserted"], counters["updated"]) == (1, 1)
    assert len(await live_contacts(db_dsn, CLIENT)) == 1  # a preview writes no contact


async def test_another_writer_cannot_add_a_second_live_contact_of_one_key(db_dsn: str) -> None:
    await store(db_dsn, CLIENT, A, "Ana")
    with pytest.raises(asyncpg.UniqueViolationError, match="contact_client_key_form_key"):
        await store(db_dsn, CLIENT, formatted(A), "Ana again")
    await store(db_dsn, CLIENT + 1, formatted(A), "Another client's Ana")  # per client


async def test_legacy_duplicates_stop_the_migration_named_and_nothing_half_done(
    pre_key_form_db: str,
) -> None:
    first = await store(pre_key_form_db, CLIENT, A, "Ana")
    second = await store(pre_key_form_db, CLIENT, formatted(A), "Ana (CRM)")
    with pytest.raises(MigrationBlockedError) as refused:
        await migrate(pre_key_form_db)
    message = str(refused.value)
    assert f"client {CLIENT}: contacts [{first}, {second}]" in message
    assert "importer db check" in message
    assert not await fetch(pre_key_form_db, "SELECT 1 FROM pg_class WHERE relname = $1", _INDEX)
    await fetch(pre_key_form_db, "UPDATE contact SET deleted_at = now() WHERE id = $1", second)
    await migrate(pre_key_form_db)  # the owner resolved the duplicate: the index is built
    state = await fetch(pre_key_form_db, _VALID, _INDEX)
    assert [r["indisvalid"] for r in state] == [True]


async def test_an_invalid_index_left_by_an_interrupted_build_is_built_again(
    pre_key_form_db: str,
) -> None:
    await fetch(
        pre_key_form_db,
        "CREATE UNIQUE INDEX contact_client_key_form_key ON contact (client_id, "
        "importer_key_form(cpf_cnpj)) WHERE cpf_cnpj IS NOT NULL AND deleted_at IS NULL",
    )
    await fetch(
        pre_key_form_db,
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass",
        _INDEX,
    )
    await migrate(pre_key_form_db)
    assert [r["indisvalid"] for r in await fetch(pre_key_form_db, _VALID, _INDEX)] == [True]


_INDEX = "contact_client_key_form_key"
_VALID = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)"

# --- the SQL normal form equals core.normalize's for every valid key, however it is spelled ---

_DIGITS = st.text("0123456789", min_size=9, max_size=9)


@st.composite
def spelled_keys(draw: st.DrawFn) -> str:
    """A valid CPF or CNPJ as some other writer may have stored it."""
    base = draw(st.integers(1, 10**8))
    key = cpf(base) if draw(st.booleans()) else _cnpj(draw(_DIGITS) + "000")
    spelled = key.lstrip("0") if draw(st.booleans()) and key.isdigit() else key
    out = []
    for char in spelled:
        out.append(char.lower() if draw(st.booleans()) else char)
        out.append(draw(st.sampled_from(["", "", "", ".", "-", "/", " ", "\t"])))
    return draw(st.sampled_from(["", " "])) + "".join(out)


def _cnpj(twelve: str) -> str:
    """A CNPJ with its two check digits (mod 11, weights 5..2/9..2 and 6..2/9..2)."""
    digits = [int(c) for c in twelve]
    for weights in ([5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2], [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]):
        total = sum(d * w for d, w in zip(digits, weights, strict=True))
        digits.append(0 if total % 11 < 2 else 11 - total % 11)
    return "".join(map(str, digits))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(spelled_keys(), min_size=1, max_size=40))
async def test_the_sql_normal_form_is_the_importers(db_dsn: str, keys: list[str]) -> None:
    expected = [normalize_cpf_cnpj(k) for k in keys]
    keys = [k for k, e in zip(keys, expected, strict=True) if not isinstance(e, Reason)]
    expected = [e for e in expected if not isinstance(e, Reason)]  # the valid keys
    rows = await fetch(db_dsn, "SELECT importer_key_form(k) AS f FROM unnest($1::text[]) k", keys)
    assert [r["f"] for r in rows] == expected

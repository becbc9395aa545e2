"""`importer db check` and `importer db migrate` on a database other components wrote: legacy
duplicates stop the migration (exit 2, named, nothing half done), the check lists them with the
invalid keys and the unnormalized channels (CSV, formula-safe, or JSON; exit 1 when any)."""

from __future__ import annotations

import csv
import io

import orjson
import pytest

from tests.acceptance.test_admin_cli import importer
from tests.support import cpf, fetch

pytestmark = pytest.mark.acceptance

CLIENT = 52
A, B = cpf(5201), cpf(5202)


async def contact(dsn: str, key: str | None, name: str) -> int:
    rows = await fetch(
        dsn,
        "INSERT INTO contact (client_id, name, cpf_cnpj) VALUES ($1, $2, $3) RETURNING id",
        CLIENT,
        name,
        key,
    )
    return int(rows[0]["id"])


async def detail(dsn: str, contact_id: int, channel: int, value: str) -> int:
    rows = await fetch(
        dsn,
        "INSERT INTO contact_details (contact_id, client_id, channel_id, value) "
        "VALUES ($1, $2, $3, $4) RETURNING id",
        contact_id,
        CLIENT,
        channel,
        value,
    )
    return int(rows[0]["id"])


async def test_legacy_rows_block_the_migration_and_the_check_lists_them(
    pre_key_form_db: str,
) -> None:
    old = await contact(pre_key_form_db, A, "Ana")
    twin = await contact(pre_key_form_db, f"{A[:3]}.{A[3:6]}.{A[6:9]}-{A[9:]}", "Ana (CRM)")
    bad = await contact(pre_key_form_db, "=1+1", "Formula")
    fine = await contact(pre_key_form_db, B, "Bruno")
    phone = await detail(pre_key_form_db, fine, 1, "(11) 3333-4444")
    email = await detail(pre_key_form_db, fine, 3, "Ana@Exemplo.com")
    await detail(pre_key_form_db, fine, 1, "+551133334445")  # the importer's form: no finding

    migrated = importer(pre_key_form_db, "db", "migrate")
    assert migrated.returncode == 2, migrated.stderr
    assert f"client {CLIENT}: contacts [{old}, {twin}]" in migrated.stderr
    assert "importer db check" in migrated.stderr
    assert "Traceback" not in migrated.stderr
    assert not await fetch(pre_key_form_db, "SELECT 1 FROM pg_class WHERE relname = $1", _INDEX)

    checked = importer(pre_key_form_db, "db", "check", "--format", "json")
    assert checked.returncode == 1, checked.stderr
    report = orjson.loads(checked.stdout)
    assert report["counts"] == {
        "legacy_duplicate": 1,
        "invalid_key": 1,
        "unnormalized_channel": 2,
    }
    kinds = {(f["kind"], tuple(f["contact_ids"]), f["detail_id"]) for f in report["findings"]}
    assert kinds == {
        ("legacy_duplicate", (old, twin), None),
        ("invalid_key", (bad,), None),
        ("unnormalized_channel", (fine,), phone),
        ("unnormalized_channel", (fine,), email),
    }
    normal = {f["detail_id"]: f["normal_form"] for f in report["findings"] if f["detail_id"]}
    assert normal == {phone: "+551133334444", email: "Ana@exemplo.com"}

    as_csv = importer(pre_key_form_db, "db", "check", "--client-id", str(CLIENT))
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == [
        "kind",
        "client_id",
        "contact_ids",
        "detail_id",
        "stored",
        "normal_form",
        "reason",
    ]
    assert [
        "invalid_key",
        str(CLIENT),
        str(bad),
        "",
        "'=1+1",
        "",
        "invalid_cpf_cnpj_format",
    ] in rows
    assert "db check: 1 legacy_duplicate, 1 invalid_key, 2 unnormalized_channel" in as_csv.stderr

    await fetch(pre_key_form_db, "UPDATE contact SET deleted_at = now() WHERE id = $1", twin)
    again = importer(pre_key_form_db, "db", "migrate")  # the owner resolved the duplicate
    assert again.returncode == 0, again.stderr
    other = importer(pre_key_form_db, "db", "check", "--client-id", str(CLIENT + 1))
    assert other.returncode == 0
    assert other.stdout.splitlines() == [",".join(rows[0])]


_INDEX = "contact_client_key_form_key"

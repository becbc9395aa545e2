"""`importer inspect FILE --client-id N`: the columns step of a local file, for a client (issue
29): its custom fields and memory from the database, the file's head only."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests.acceptance.test_admin_cli import importer
from tests.support import cpf, fetch, write_csv

pytestmark = pytest.mark.acceptance


def suggestions(document: dict[str, object]) -> dict[str, tuple[str, str]]:
    columns = document["columns"]
    assert isinstance(columns, list)
    return {c["header"]: (c["suggestion"]["target"], c["suggestion"]["reason"]) for c in columns}


async def test_inspect_suggests_from_memory_fields_aliases_and_values(
    db_dsn: str, tmp_path: Path
) -> None:
    rows = [[f"P{i}", cpf(5100 + i), f"p{i}@example.com.br", "ouro", "x"] for i in range(8)]
    path = write_csv(tmp_path / "c.csv", ["Nome", "Coluna 2", "Contato", "Plano", "Canal"], rows)
    await fetch(db_dsn, "INSERT INTO custom_field (client_id, name) VALUES (31, 'plano')")
    await fetch(
        db_dsn,
        "INSERT INTO import_column_memory VALUES (31, 'canal', 'whatsapp', 2, $1)",
        dt.datetime.now(dt.UTC),
    )

    done = importer(db_dsn, "inspect", str(path), "--client-id", "31", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["import_id"] is None
    assert suggestions(document) == {
        "Nome": ("name", "alias"),
        "Coluna 2": ("cpf_cnpj", "values"),
        "Contato": ("email", "values"),
        "Plano": ("custom_field", "custom_field"),
        "Canal": ("whatsapp", "memory"),
    }
    assert document["columns"][1]["samples"] == [cpf(5100 + i) for i in range(5)]

    other = importer(db_dsn, "inspect", str(path), "--client-id", "32", "--json")
    assert suggestions(json.loads(other.stdout))["Canal"] == ("new_custom_field", "unmatched")

    table = importer(db_dsn, "inspect", str(path), "--client-id", "31")
    assert table.returncode == 0, table.stderr
    for shown in ("Coluna 2", "cpf_cnpj", "values (100% of", "memory", "'plano' #"):
        assert shown in table.stdout
    assert importer(db_dsn, "inspect", str(path)).returncode == 2  # --client-id is required

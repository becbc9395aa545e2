"""The embedded PostgreSQL (DATABASE_URL unset): created and started on first use, shared by
commands started at once, stopped by `importer db stop`; a directory it cannot use is an error
that names it (exit 2), never a traceback and never a re-created directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import orjson
import pytest

from tests.conftest import ADMIN_DSN
from tests.support import cpf, write_csv

pytestmark = [pytest.mark.acceptance, pytest.mark.embedded]

IMPORTER = str(Path(sys.executable).with_name("importer"))
ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "samples" / "contacts.csv"


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return {**env, "IMPORTER_DATA_DIR": str(data_dir), "IMPORTER_LOG_LEVEL": "warning"}


def importer(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IMPORTER, *args],
        env=embedded_env(data_dir),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=data_dir.parent,
    )


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A fresh data directory; its server is stopped at the end whatever the test did.

    Not under pytest's tmp_path: every pytest session takes the search permission of others
    off /tmp/pytest-of-<user>, and as root the server runs as another user.
    """
    parent = Path(tempfile.mkdtemp(prefix="importer-embedded-"))
    path = parent / "pg"
    yield path
    importer(path, "db", "stop")
    shutil.rmtree(parent, ignore_errors=True)


def status(data_dir: Path) -> dict[str, object]:
    done = importer(data_dir, "db", "status", "--json")
    document = orjson.loads(done.stdout)
    assert isinstance(document, dict)
    assert done.returncode == (0 if document["state"] == "running" else 3), done
    return document


def refused(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


async def _machine_contacts() -> int | None:
    """The contacts of the machine's (or CI's) own server's default database, if it has any."""
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        if await conn.fetchval("SELECT to_regclass('contact') IS NULL"):
            return None
        return int(await conn.fetchval("SELECT count(*) FROM contact"))
    finally:
        await conn.close()


async def test_the_sample_imports_into_the_embedded_server(data_dir: Path) -> None:
    before = await _machine_contacts()
    assert status(data_dir)["state"] == "absent"
    done = importer(data_dir, "import", str(SAMPLE), "--client-id", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("database: embedded PostgreSQL 18 in pg ") == 1, done.stderr
    assert "(set DATABASE_URL to use your own)" in done.stderr
    outcome = orjson.loads(done.stdout)
    assert outcome["status"] == "completed_with_placeholders"
    assert outcome["rows_read"] == 1000
    document = status(data_dir)
    assert document["state"] == "running"
    assert str(document["version"]).startswith("18.")
    async with _embedded(document) as conn:
        assert await conn.fetchval("SELECT count(*) FROM contact WHERE client_id = 1") > 800
        assert await conn.fetchval("SHOW listen_addresses") == ""  # a Unix socket only
    assert await _machine_contacts() == before  # the machine's PostgreSQL gained no rows
    stopped = importer(data_dir, "db", "stop")
    assert stopped.returncode == 0
    assert "stopped" in stopped.stdout
    assert status(data_dir)["state"] == "stopped"
    again = importer(data_dir, "history", "--client-id", "1", "--json")  # starts it again
    assert again.returncode == 0, again.stderr
    assert len(orjson.loads(again.stdout)["items"]) == 1


class _embedded:
    def __init__(self, document: dict[str, object]) -> None:
        self.url = str(document["url"])

    async def __aenter__(self) -> asyncpg.Connection:
        self.conn: asyncpg.Connection = await asyncpg.connect(self.url)
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        await self.conn.close()


def test_two_imports_started_at_once_share_one_new_server(data_dir: Path, tmp_path: Path) -> None:
    files = [
        write_csv(tmp_path / f"{n}.csv", ["nome", "cpf"], [[f"N{n}", cpf(6200 + n)]])
        for n in range(2)
    ]
    with ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(
                lambda path: importer(data_dir, "import", str(path), "--client-id", "2", "--json"),
                files,
            )
        )
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout)["status"] == "completed"
    document = status(data_dir)
    history = importer(data_dir, "history", "--client-id", "2", "--json")
    assert len(orjson.loads(history.stdout)["items"]) == 2  # both in the one server's database
    assert not list(data_dir.parent.glob(".pg.init-*")), "no staging directory left"
    postmasters = subprocess.run(
        ["pgrep", "-f", f"postgres -D {data_dir}( |$)"], capture_output=True, text=True, check=False
    )
    assert postmasters.stdout.split() == [str(document["pid"])]


def test_a_directory_holding_other_files_is_refused_untouched(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "notes.txt").write_text("mine")
    done = importer(data_dir, "db", "migrate")
    refused(done, "pg is not a PostgreSQL data directory", "IMPORTER_DATA_DIR")
    assert [p.name for p in data_dir.iterdir()] == ["notes.txt"]


def test_another_major_version_and_a_damaged_directory_are_refused(data_dir: Path) -> None:
    assert importer(data_dir, "db", "start").returncode == 0
    assert importer(data_dir, "db", "stop").returncode == 0
    newer = data_dir.parent / "newer"
    shutil.copytree(data_dir, newer, symlinks=True)
    (newer / "PG_VERSION").write_text("19\n")
    refused(
        importer(newer, "status", "7c1f44e0-0000-4000-8000-000000000000"),
        "newer holds a PostgreSQL 19 cluster and the embedded server is PostgreSQL 18",
        "IMPORTER_DATA_DIR",
    )
    assert (newer / "PG_VERSION").read_text() == "19\n"
    (data_dir / "global" / "pg_control").unlink()
    refused(importer(data_dir, "import", str(SAMPLE), "--client-id", "1"), "pg is damaged")
    assert (data_dir / "PG_VERSION").is_file(), "nothing deleted"


def test_stop_and_status_with_database_url_name_the_users_own_server(data_dir: Path) -> None:
    env = {**embedded_env(data_dir), "DATABASE_URL": ADMIN_DSN}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [IMPORTER, *args], env=env, capture_output=True, text=True, check=False, timeout=60
        )

    shown = run("db", "status", "--json")
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["state"] == "running"
    refused(run("db", "stop"), "stops the embedded PostgreSQL only")
    assert not data_dir.exists(), "DATABASE_URL set: no embedded server"

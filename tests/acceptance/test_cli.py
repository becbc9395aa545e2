"""The command line as a user runs it: a subprocess against the real PostgreSQL."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from importer.core.principals import Permission, Principal
from importer.http.auth import TokenVerifier
from tests.support import cpf, fetch

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "contacts.csv"


def importer(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": dsn, "IMPORTER_LOG_LEVEL": "warning"}
    return subprocess.run(
        [sys.executable, "-m", "importer", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def import_json(dsn: str, path: Path, *args: str) -> tuple[int, dict[str, object]]:
    done = importer(dsn, "import", str(path), "--json", *args)
    assert done.stdout, done.stderr
    document = json.loads(done.stdout)
    counted = sum(document[k] for k in ("inserted", "updated", "invalid", "error", "ignored"))
    assert document["rows_read"] == counted, document  # the counter identity
    return done.returncode, document


def test_migrate_is_idempotent(db_dsn: str) -> None:
    assert importer(db_dsn, "db", "migrate").returncode == 0
    assert importer(db_dsn, "db", "migrate").returncode == 0


def test_sample_imports_and_errors_out_is_formula_safe(db_dsn: str, tmp_path: Path) -> None:
    report = tmp_path / "errors.csv"
    code, doc = import_json(db_dsn, SAMPLE, "--client-id", "1", "--errors-out", str(report))
    assert code == 0
    assert doc["status"] == "completed_with_placeholders"
    assert doc["rows_read"] == 1000
    assert doc["invalid"] > 0
    rows = list(csv.DictReader(io.StringIO(report.read_text(encoding="utf-8"))))
    assert {"line", "column", "reason", "value"} <= set(rows[0])
    assert sum(1 for r in rows if r["severity"] == "invalid") == doc["invalid"]
    code, again = import_json(db_dsn, SAMPLE, "--client-id", "1", "--strategy", "ignore")
    assert code == 0
    assert again["inserted"] == 0
    assert again["ignored"] == doc["inserted"] + doc["updated"]


def test_formula_values_are_stored_verbatim_and_neutralized_in_the_report(
    db_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "formula.csv"
    path.write_text(f'nome,cpf,email\n=HYPERLINK("x"),{cpf(9)},@bad\n\\N,=1+1,\n', encoding="utf-8")
    report = tmp_path / "r.csv"
    code, doc = import_json(db_dsn, path, "--client-id", "2", "--errors-out", str(report))
    assert code == 0
    assert (doc["inserted"], doc["invalid"]) == (1, 1)
    stored = await_name(db_dsn, 2)
    assert stored == ['=HYPERLINK("x")']
    cells = list(csv.reader(io.StringIO(report.read_text(encoding="utf-8"))))
    values = [row[4] for row in cells[1:]]
    assert values == ["'@bad", "'=1+1"]


def await_name(dsn: str, client_id: int) -> list[str]:
    import asyncio

    rows = asyncio.run(fetch(dsn, "SELECT name FROM contact WHERE client_id = $1", client_id))
    return [r["name"] for r in rows]


def test_file_level_failure_exits_non_zero_with_fail_reason(db_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    code, doc = import_json(db_dsn, path, "--client-id", "3")
    assert code == 1
    assert doc["status"] == "failed"
    assert doc["fail_reason"] == "empty_file"


def test_gzip_jsonl_and_layout(db_dsn: str, tmp_path: Path) -> None:
    gz = tmp_path / "c.csv.gz"
    gz.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    code, doc = import_json(
        db_dsn, gz, "--client-id", "4", "--chunk-size", "7", "--concurrency", "3"
    )
    assert (code, doc["rows_read"]) == (0, 1000)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(
        json.dumps({"documento": cpf(11), "nome": "Ana", "plano": 3})
        + "\n"
        + "not json\n"
        + json.dumps([1])
        + "\n",
        encoding="utf-8",
    )
    code, doc = import_json(db_dsn, jsonl, "--client-id", "5")
    assert (doc["inserted"], doc["invalid"]) == (1, 2)
    cp1252 = tmp_path / "excel.csv"
    cp1252.write_bytes(f"Doc;Nome;Cidade\n{cpf(12)};Conceição;São Paulo\n".encode("cp1252"))
    layout = tmp_path / "layout.json"
    layout.write_text(
        json.dumps(
            {
                "delimiter": ";",
                "encoding": "cp1252",
                "columns": {"Doc": "cpf_cnpj", "Cidade": "custom:cidade"},
            }
        )
    )
    code, doc = import_json(db_dsn, cp1252, "--client-id", "6", "--layout", str(layout))
    assert (code, doc["inserted"]) == (0, 1)


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"delimeter": ";"}, "unknown key 'delimeter' in layout (did you mean 'delimiter'?)"),
        ({"colums": {"Doc": "cpf_cnpj"}}, "unknown key 'colums' in layout"),
        ({"columns": {"Doc": "cpf_cnjp"}}, "unknown layout target 'cpf_cnjp'"),
    ],
)
async def test_a_misspelt_layout_is_refused_before_anything_runs(
    db_dsn: str, tmp_path: Path, document: dict[str, object], words: str
) -> None:
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(document))
    done = importer(db_dsn, "import", str(SAMPLE), "--client-id", "1", "--layout", str(layout))
    assert done.returncode == 2
    assert done.stderr.startswith("importer: "), done.stderr
    assert words in done.stderr
    assert (await fetch(db_dsn, "SELECT count(*) AS n FROM import_job"))[0]["n"] == 0


def test_bad_arguments_are_refused(db_dsn: str) -> None:
    assert (
        importer(db_dsn, "import", str(SAMPLE), "--client-id", "1", "--chunk-size", "0").returncode
        == 2
    )
    assert (
        importer(db_dsn, "import", str(SAMPLE), "--client-id", "1", "--strategy", "x").returncode
        == 2
    )
    missing = importer(db_dsn, "import", "/nonexistent.csv", "--client-id", "1")
    assert missing.returncode == 2
    assert "nonexistent" in missing.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [("IMPORTER_CHUNK_SIZE", "abc"), ("IMPORTER_FAILPOINTS", "nowhere=crash")],
)
def test_a_bad_variable_is_one_line_and_exit_2(db_dsn: str, variable: str, value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "importer", "import", str(SAMPLE), "--client-id", "1"],
        env={**os.environ, "DATABASE_URL": db_dsn, variable: value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"importer: {variable}"), done.stderr


def run_token(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``importer token`` needs no database: only the JWT variables of ``env`` matter."""
    clean = {k: v for k, v in os.environ.items() if k not in ("JWT_SECRET", "JWT_PUBLIC_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "importer", "token", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_token_command_mints_a_token_the_verifier_accepts() -> None:
    secret = "acceptance-secret-0123456789abcdefghij"
    args = "--client-id 7 --user-id u-1 --permission HSM.CREATE --permission IMPORT.ADMIN --ttl 120"
    done = run_token({"JWT_SECRET": secret}, *args.split())
    assert done.returncode == 0, done.stderr
    principal = TokenVerifier(secret=secret).verify(done.stdout.strip())
    assert principal == Principal(
        user_id="u-1",
        client_id=7,
        permissions=frozenset({Permission.HSM_CREATE, Permission.IMPORT_ADMIN}),
    )
    default = run_token({"JWT_SECRET": secret}, "--client-id", "7", "--user-id", "u-1")
    permissions = TokenVerifier(secret=secret).verify(default.stdout.strip()).permissions
    assert permissions == {Permission.CONTACT_IMPORT_CREATE}


def test_token_command_without_a_secret_says_so() -> None:
    done = run_token({}, "--client-id", "7", "--user-id", "u-1")
    assert done.returncode != 0
    assert done.stdout == ""
    assert "JWT_SECRET is not set" in done.stderr
    assert "Traceback" not in done.stderr


def test_token_command_signs_rs256_with_a_private_key_file(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    done = run_token({}, "--client-id", "8", "--user-id", "u-2", "--private-key", str(pem))
    assert done.returncode == 0, done.stderr
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    principal = TokenVerifier(public_key_pem=public.decode()).verify(done.stdout.strip())
    assert (principal.user_id, principal.client_id) == ("u-2", 8)
    pem.write_text("not a key")
    refused = run_token({}, "--client-id", "8", "--user-id", "u-2", "--private-key", str(pem))
    assert refused.returncode == 2
    assert "private key" in refused.stderr
    assert "Traceback" not in refused.stderr


async def test_the_sample_keyed_by_email_previews_then_imports_the_same_counters(
    db_dsn: str, tmp_path: Path
) -> None:
    """Issue 14 point 5 through the CLI: ``--layout`` with ``"key": "email"`` (the CPF column
    ignored); the dry run's counters are the import's, and every contact has no CPF."""
    layout = tmp_path / "email.json"
    layout.write_text(json.dumps({"key": "email", "columns": {"cpf": "ignore"}}))
    args = ("--client-id", "71", "--layout", str(layout))
    code, preview = import_json(db_dsn, SAMPLE, *args, "--dry-run")
    assert (code, preview["status"]) == (0, "ready")
    code, done = import_json(db_dsn, SAMPLE, *args)
    assert code == 0
    counted = {
        k: done[k] for k in ("rows_read", "inserted", "updated", "invalid", "error", "ignored")
    }
    assert preview["preview"]["counters"] == counted  # type: ignore[index]
    assert done["inserted"] > 0
    rows = await fetch(
        db_dsn, "SELECT count(*) AS n, count(cpf_cnpj) AS cpfs FROM contact WHERE client_id = 71"
    )
    assert (rows[0]["n"], rows[0]["cpfs"]) == (done["inserted"], 0)


def test_errors_format_source_writes_the_rejected_rows_as_sent(db_dsn: str, tmp_path: Path) -> None:
    """``--errors-out FILE --errors-format source`` (issue 15 point 2): the header and each
    rejected row as it was in the file, behind ``importer_error``, in its delimiter."""
    path = tmp_path / "tab.csv"
    path.write_text("nome\tcpf\nAna\t52998224725\nBob\t111\n", encoding="utf-8")
    out = tmp_path / "rejected.csv"
    args = ("--client-id", "72", "--errors-out", str(out), "--errors-format", "source")
    code, doc = import_json(db_dsn, path, *args)
    assert (code, doc["invalid"]) == (0, 1)
    assert list(csv.reader(io.StringIO(out.read_text("utf-8")), delimiter="\t")) == [
        ["importer_error", "nome", "cpf"],
        ["line 3: invalid_cpf (cpf)", "Bob", "111"],
    ]


async def test_notify_url_is_checked_like_a_create_and_gets_a_delivery(
    db_dsn: str, tmp_path: Path
) -> None:
    """``importer import --notify-url`` (issue 15 point 3): refused (exit 2, one line) for a
    private target without IMPORTER_WEBHOOK_ALLOW_PRIVATE and for a client without a webhook
    secret; with both, the finalization writes the job's delivery to it."""
    url = "http://127.0.0.1:9/hook"
    args = ("--client-id", "73", "--notify-url", url)
    refused = importer(db_dsn, "import", str(SAMPLE), *args)
    assert refused.returncode == 2
    assert "https" in refused.stderr
    os.environ["IMPORTER_WEBHOOK_ALLOW_PRIVATE"] = "1"
    try:
        no_secret = importer(db_dsn, "import", str(SAMPLE), *args)
        assert no_secret.returncode == 2
        assert "no webhook secret" in no_secret.stderr
        assert (
            importer(db_dsn, "client", "webhook", "--client-id", "73", "--new-secret").returncode
            == 0
        )
        code, doc = import_json(db_dsn, SAMPLE, *args)
    finally:
        del os.environ["IMPORTER_WEBHOOK_ALLOW_PRIVATE"]
    assert code == 0
    rows = await fetch(
        db_dsn,
        "SELECT delivery_id, url FROM webhook_delivery WHERE job_id::text = $1",
        doc["job_id"],
    )
    assert [(r["delivery_id"], r["url"]) for r in rows] == [(f"notification:{doc['job_id']}", url)]

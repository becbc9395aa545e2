"""``importer``: the command line (argparse; a rich progress bar on a terminal)."""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path

import orjson
import uvloop
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table

from importer import wiring
from importer.core import failpoints
from importer.core.errors import (
    ConfigurationError,
    ImporterError,
    JobNotFoundError,
    ServiceUnreachableError,
)
from importer.core.layout import parse_layout
from importer.core.models import (
    TERMINAL_STATUSES,
    ConflictStrategy,
    Counters,
    InputFormat,
    JobStatus,
)
from importer.core.principals import Permission, Principal
from importer.core.progress import Phase, RateWindow, eta_seconds, format_eta, run_phase
from importer.http.auth import DEFAULT_TTL_S, MAX_CLIENT_ID, mint_token
from importer.logs import configure_logging
from importer.services import admin
from importer.services.local import (
    S3_SCHEME,
    ImportOutcome,
    ImportRequest,
    S3Location,
    parse_s3_url,
)
from importer.services.runs import format_for
from importer.settings import Settings, log_level_for


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="importer",
        description="Import contact lists (CSV, JSONL, gzip) into PostgreSQL, exactly; serve the "
        "HTTP API and its workers; look after imports.",
        epilog="`importer COMMAND --help` describes a command's options and their defaults.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    db = commands.add_parser("db", help="database schema")
    db.add_subparsers(dest="db_command", required=True).add_parser(
        "migrate", help="apply schema.sql (idempotent)"
    )
    _add_import_parser(commands, settings)
    _add_read_parsers(commands)
    _add_token_parser(commands)
    _add_serve_parser(commands)
    _add_admin_parsers(commands)
    worker = commands.add_parser(
        "worker", help="run queued imports until SIGTERM or SIGINT (drains, releases leases)"
    )
    worker.add_argument(
        "--workers",
        type=_positive,
        default=settings.workers_per_process,
        help="imports run at once by this process (default: IMPORTER_WORKERS, 1)",
    )
    return parser


IMPORT_EPILOG = """\
environment: DATABASE_URL (the database), IMPORTER_CHUNK_SIZE and IMPORTER_CONCURRENCY (the
defaults above), S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (for
s3:// sources), IMPORTER_LOG_LEVEL (default warning), IMPORTER_LOG_FORMAT (console or json).
exit status: 0 the job completed, 1 it failed, 2 a usage or configuration error (a service
that does not answer included).
"""


def _strategy(raw: str) -> ConflictStrategy:
    try:
        return ConflictStrategy.parse(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"merge or discard (or ignore), not {raw!r}") from None


def _location(raw: str) -> Path | S3Location:
    """A local path, or ``s3://bucket/key``."""
    if not raw.startswith(S3_SCHEME):
        return Path(raw)
    try:
        return parse_s3_url(raw)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_import_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], settings: Settings
) -> None:
    imp = commands.add_parser(
        "import",
        help="import a CSV/JSONL/XLSX file (plain or .gz) or an s3:// object, in this process",
        description="Import a contact list into PostgreSQL in this process: one job, COPY in\n"
        "chunks, a live bar on a terminal and a summary at the end.",
        epilog=IMPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument(
        "path",
        type=_location,
        metavar="PATH|s3://BUCKET/KEY",
        help="a local file, or an object read through the S3 settings of the environment "
        "(its size and sha256 sealed on the job, the bytes pinned while they are read)",
    )
    imp.add_argument(
        "--client-id",
        type=int,
        required=True,
        metavar="N",
        help="the tenant the contacts belong to (required)",
    )
    imp.add_argument(
        "--strategy",
        type=_strategy,
        default=ConflictStrategy.MERGE,
        metavar="merge|discard",
        help="an existing contact: merge updates it, discard leaves it (ignore = discard); "
        "default merge",
    )
    imp.add_argument(
        "--layout",
        type=Path,
        metavar="FILE",
        help="JSON layout: columns to targets, delimiter, encoding, header (default: the "
        "header mapped by its aliases, the encoding and delimiter sniffed)",
    )
    imp.add_argument(
        "--format",
        choices=[f.value for f in InputFormat],
        help="default: from the name (.jsonl/.ndjson: jsonl, .xlsx: xlsx, +.gz; else csv)",
    )
    imp.add_argument(
        "--chunk-size",
        type=_positive,
        default=settings.chunk_size,
        metavar="N",
        help="rows per chunk, one transaction each (any N >= 1; default %(default)s, "
        "IMPORTER_CHUNK_SIZE)",
    )
    imp.add_argument(
        "--concurrency",
        type=_positive,
        default=settings.concurrency,
        metavar="N",
        help="consumers writing at once, one key partition each (default %(default)s, "
        "IMPORTER_CONCURRENCY)",
    )
    imp.add_argument(
        "--errors-out",
        type=Path,
        metavar="FILE",
        help="write the per-row error report here as CSV: line, column, reason, severity, "
        "value, formula-safe (default: none written)",
    )
    imp.add_argument(
        "--user-id",
        metavar="U",
        help="the user the job is recorded for, as in the history (default: none)",
    )
    imp.add_argument(
        "--international",
        action="store_true",
        help="phones carry their +country code (default: Brazilian numbers, region BR)",
    )
    imp.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout instead of the bar and the table",
    )


def _add_read_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``importer status`` and ``importer history``: the owner's reads, any client's jobs."""
    status = commands.add_parser(
        "status",
        help="one import's status, counters, progress, ETA and fail reason (DATABASE_URL)",
    )
    status.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    status.add_argument(
        "--json", action="store_true", help="print the API's status document as JSON"
    )
    history = commands.add_parser(
        "history", help="imports newest first, every client's unless filtered (DATABASE_URL)"
    )
    history.add_argument(
        "--client-id", type=_client_id, metavar="N", help="only this client's (default: all)"
    )
    history.add_argument("--user-id", metavar="U", help="only this user's (default: all)")
    history.add_argument(
        "--status",
        action="append",
        choices=[s.value for s in JobStatus],
        metavar="S",
        help="only jobs in this status; repeatable (default: any)",
    )
    history.add_argument(
        "--limit",
        type=_positive,
        default=admin.DEFAULT_LIST_LIMIT,
        metavar="N",
        help="at most N imports (default %(default)s)",
    )
    history.add_argument("--json", action="store_true", help="print {items, more} as JSON")


def _non_empty(raw: str) -> str:
    if not raw:
        raise argparse.ArgumentTypeError("must not be empty")
    return raw


def _client_id(raw: str) -> int:
    value = _positive(raw)
    if value > MAX_CLIENT_ID:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CLIENT_ID}")
    return value


def _add_token_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = commands.add_parser(
        "token",
        help="mint a bearer token for local use (HS256 with JWT_SECRET, or RS256 with a key file)",
    )
    token.add_argument(
        "--client-id", type=_client_id, required=True, help="the token's tenant (required)"
    )
    token.add_argument(
        "--user-id", type=_non_empty, required=True, help="the token's user (required)"
    )
    token.add_argument(
        "--permission",
        action="append",
        choices=[p.value for p in Permission],
        help=f"repeatable; default {Permission.CONTACT_IMPORT_CREATE.value}",
    )
    token.add_argument(
        "--ttl",
        type=_positive,
        default=DEFAULT_TTL_S,
        help="lifetime in seconds (default %(default)s)",
    )
    token.add_argument(
        "--private-key",
        type=Path,
        help="PEM RSA private key: sign with RS256 (default: HS256 with JWT_SECRET)",
    )


def _add_serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="the HTTP API and the job workers (uvicorn, uvloop)")
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default %(default)s)"
    )
    serve.add_argument(
        "--port", type=_positive, default=8000, help="the port to listen on (default %(default)s)"
    )


def _job_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an import id: {raw!r}") from None


def _add_admin_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The owner's operations (seed 001's runbook), on DATABASE_URL and RABBITMQ_URL directly."""
    job = commands.add_parser("job", help="owner operations on one import (no token needed)")
    job_commands = job.add_subparsers(dest="job_command", required=True)
    requeue = job_commands.add_parser(
        "requeue",
        help="a failed, cancelled or abandoned (lease expired) import (or a completed one whose "
        "data was removed) back to queued for the workers: the next run resumes from its ledger",
    )
    requeue.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    resume = job_commands.add_parser(
        "resume",
        help="run a cancelled, failed or abandoned (lease expired) import on in this process from "
        "its checkpoint, with the progress bar (a command-line import: its file at the same path, "
        "with the same size and sha256)",
    )
    resume.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    resume.add_argument("--errors-out", type=Path, help="write the error report (CSV) here")
    resume.add_argument("--json", action="store_true", help="one JSON object on stdout")
    remove = job_commands.add_parser(
        "remove-data",
        help="soft-delete the contacts an ended import created and clear its ledger (idempotent)",
    )
    remove.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    dlq = commands.add_parser("dlq", help="the dead-letter queue of chunk messages (RABBITMQ_URL)")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    listing = dlq_commands.add_parser("list", help="look at dead letters without consuming them")
    listing.add_argument(
        "--limit",
        type=_positive,
        default=admin.DEFAULT_LIST_LIMIT,
        help="at most this many letters (default %(default)s)",
    )
    replay = dlq_commands.add_parser(
        "replay", help="republish the dead letters of running imports to the main queue"
    )
    replay.add_argument("--job", type=_job_id, help="only this import's (default: every one's)")


class TerminalProgress:
    """A live bar: phase, rows, rows/s and ETA over the last few seconds (importer/progress.py,
    as the API shows them) and invalid rows so far; updated per batch."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("[bold]{task.fields[phase]:<10}"),
            BarColumn(),
            TextColumn("{task.fields[rows]:>12,} rows"),
            TextColumn("{task.fields[rate]:>9,.0f} rows/s"),
            TextColumn("ETA {task.fields[eta]:>9}"),
            TextColumn("invalid {task.fields[invalid]:,}"),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._total: int | None = None
        self._window = RateWindow(time.perf_counter())

    @property
    def console(self) -> Console:
        """Where to print above the live bar."""
        return self._bar.console

    def __enter__(self) -> TerminalProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def on_start(self, bytes_total: int | None) -> None:
        self._window = RateWindow(time.perf_counter())
        self._total = bytes_total
        self._task = self._bar.add_task(
            "import",
            total=bytes_total,
            phase=Phase.READING.value,
            rows=0,
            rate=0.0,
            eta=format_eta(None),
            invalid=0,
        )

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        if self._task is None:
            return
        now = time.perf_counter()
        self._window.add(now, counters.rows_read, bytes_read)
        rows_per_s, bytes_per_s = self._window.rates(now)
        read_to_end = self._total is not None and bytes_read >= self._total
        phase = run_phase(running=True, batches_done=True, read_to_end=read_to_end)
        self._bar.update(
            self._task,
            completed=bytes_read,
            phase=phase.value if phase is not None else "",
            rows=counters.rows_read,
            rate=rows_per_s,
            eta=format_eta(eta_seconds(bytes_read, self._total, bytes_per_s)),
            invalid=counters.invalid,
        )


def outcome_document(outcome: ImportOutcome) -> dict[str, object]:
    c = outcome.counters
    document: dict[str, object] = {
        "job_id": str(outcome.job_id),
        "status": outcome.status.value,
        "rows_read": c.rows_read,
        "inserted": c.inserted,
        "updated": c.updated,
        "invalid": c.invalid,
        "error": c.error,
        "ignored": c.ignored,
        "elapsed_s": round(outcome.elapsed_s, 3),
        "rows_per_s": round(c.rows_read / outcome.elapsed_s, 1) if outcome.elapsed_s else 0.0,
        "cpu_s": round(time.process_time(), 2),
    }
    if outcome.fail_reason is not None:
        document["fail_reason"] = outcome.fail_reason
    if outcome.warnings:
        document["warnings"] = [
            {"code": w.code.value, "message": w.message} for w in outcome.warnings
        ]
    return document


def summary_table(outcome: ImportOutcome) -> Table:
    table = Table(title=f"import {outcome.job_id}", show_header=False)
    for key, value in outcome_document(outcome).items():
        if key == "warnings":
            for warning in outcome.warnings:
                table.add_row(f"warning: {warning.code.value}", warning.message, style="yellow")
            continue
        table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    return table


def _request(args: argparse.Namespace) -> ImportRequest:
    layout_document = None
    layout = None
    if args.layout is not None:
        layout_document = orjson.loads(args.layout.read_bytes())
        if not isinstance(layout_document, dict):
            raise ImporterError("the layout file must hold a JSON object")
        layout = parse_layout(layout_document)
    input_format = InputFormat(args.format) if args.format else format_for(args.path.name)
    return ImportRequest(
        client_id=args.client_id,
        strategy=args.strategy,
        input_format=input_format,
        chunk_size=args.chunk_size,
        concurrency=args.concurrency,
        layout=layout,
        layout_document=layout_document,
        user_id=args.user_id,
        international=args.international,
    )


def _tune_gc() -> None:
    """Collect young objects ~700 times less often, and never the start-up ones.

    An import allocates millions of short-lived, acyclic tuples: at the default threshold (700)
    the cyclic collector took a quarter of the importer's CPU.
    """
    gc.freeze()
    gc.set_threshold(500_000, 20, 20)


def _import(settings: Settings, args: argparse.Namespace) -> int:
    request = _request(args)
    _tune_gc()
    # A local path is sealed on the job absolute: `importer job resume` finds it there.
    path = args.path.absolute() if isinstance(args.path, Path) else args.path
    interrupt = wiring.Interrupt()

    def run(progress: TerminalProgress | None) -> Coroutine[None, None, ImportOutcome]:
        def announce(job_id: uuid.UUID) -> None:
            line = f"importer: import {job_id} (if interrupted: `importer job resume {job_id}`)"
            if progress is None:
                print(line, file=sys.stderr)
            else:
                progress.console.print(line, markup=False, highlight=False)

        return wiring.run_import(
            settings, path, request, progress, args.errors_out, interrupt, announce
        )

    return _report(_with_bar(args.json, run), interrupt, args.json)


def _resume(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job resume JOB``: like ``import``; a refusal is one line on stderr, exit 1."""
    _tune_gc()
    interrupt = wiring.Interrupt()

    def run(progress: TerminalProgress | None) -> Coroutine[None, None, ImportOutcome]:
        return wiring.run_resume(settings, args.job_id, progress, args.errors_out, interrupt)

    try:
        outcome = _with_bar(args.json, run)
    except ImporterError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 1
    return _report(outcome, interrupt, args.json)


def _with_bar(
    json_out: bool, run: Callable[[TerminalProgress | None], Coroutine[None, None, ImportOutcome]]
) -> ImportOutcome:
    """Run the import, with the live bar on a terminal (not with ``--json``)."""
    console = Console(stderr=True)
    if console.is_terminal and not json_out:
        with TerminalProgress(console) as progress:
            return uvloop.run(run(progress))
    return uvloop.run(run(None))


def _report(outcome: ImportOutcome, interrupt: wiring.Interrupt, json_out: bool) -> int:
    """The summary (or the JSON document); how to resume a job left unfinished. Exit 0 when
    completed, 128 + the signal when the user's SIGINT (130) or SIGTERM (143) cancelled it,
    else 1."""
    if json_out:
        sys.stdout.write(orjson.dumps(outcome_document(outcome)).decode() + "\n")
    else:
        Console().print(summary_table(outcome))
    if outcome.status is JobStatus.CANCELLED or outcome.status not in TERMINAL_STATUSES:
        print(
            f"importer: import {outcome.job_id} {outcome.status.value}: resume it with"
            f" `importer job resume {outcome.job_id}`",
            file=sys.stderr,
        )
    if outcome.succeeded:
        return 0
    if outcome.status is JobStatus.CANCELLED and interrupt.exit_code is not None:
        return interrupt.exit_code
    return 1


def flat_fields(document: Mapping[str, object], prefix: str = "") -> list[tuple[str, str]]:
    """A document's fields as (name, text) rows, nested ones as ``parent.child``; absent values
    (None, empty lists) left out. Whatever fields the document has are shown."""
    rows: list[tuple[str, str]] = []
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows.extend(flat_fields(value, f"{name}."))
        elif value is None or value in ([], ()):
            continue
        elif isinstance(value, bool):
            rows.append((name, "yes" if value else "no"))
        elif isinstance(value, int):
            rows.append((name, f"{value:,}"))
        elif isinstance(value, list | tuple):
            rows.append((name, ", ".join(_text(v) for v in value)))
        else:
            rows.append((name, _text(value)))
    return rows


def _text(value: object) -> str:
    if isinstance(value, Mapping | list):
        return orjson.dumps(value).decode()
    return str(value)


def status_table(document: Mapping[str, object]) -> Table:
    table = Table(title=f"import {document.get('id', '')}", show_header=False)
    for name, text in flat_fields(document):
        table.add_row(name, text)
    return table


HISTORY_COLUMNS = ("id", "client", "user", "status", "file", "rows", "%", "created (UTC)")


def history_row(item: Mapping[str, object]) -> tuple[str, ...]:
    counters = item.get("counters")
    progress = item.get("progress")
    rows = counters.get("rows_read") if isinstance(counters, Mapping) else None
    percent = progress.get("percent") if isinstance(progress, Mapping) else None
    cells = (
        item.get("id"),
        item.get("client_id"),
        item.get("user_id"),
        item.get("status"),
        item.get("filename"),
        f"{rows:,}" if isinstance(rows, int) else rows,
        percent,
        _minute(item.get("created_at")),
    )
    return tuple("" if cell is None else str(cell) for cell in cells)


def _minute(moment: object) -> object:
    """An ISO 8601 time to the minute, for a table cell."""
    if not isinstance(moment, str):
        return moment
    try:
        parsed = dt.datetime.fromisoformat(moment)
    except ValueError:
        return moment
    return parsed.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")


def history_table(document: Mapping[str, object]) -> Table:
    table = Table(title="imports, newest first")
    for column in HISTORY_COLUMNS:
        table.add_column(column, no_wrap=column in ("id", "status", "created (UTC)"))
    items = document.get("items")
    for item in items if isinstance(items, list) else []:
        table.add_row(*history_row(item))
    if document.get("more"):
        table.caption = "more: raise --limit or filter"
    return table


def _read(settings: Settings, args: argparse.Namespace) -> int:
    """``importer status`` and ``importer history``: the API's documents, read straight from
    DATABASE_URL (no token, any client); a missing job is one line on stderr and exit 1."""
    try:
        document = uvloop.run(_read_document(settings, args))
    except JobNotFoundError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    elif args.command == "status":
        Console().print(status_table(document))
    else:
        console = Console()  # a pipe gets 80 columns from rich: too few for a history row
        Console(width=max(console.width, 132) if not console.is_terminal else None).print(
            history_table(document)
        )
    return 0


async def _read_document(settings: Settings, args: argparse.Namespace) -> dict[str, object]:
    now = dt.datetime.now(dt.UTC)
    async with wiring.job_reader(settings) as jobs:
        if args.command == "status":
            return await admin.job_status(jobs, args.job_id, now)
        wanted = admin.HistoryFilter(
            client_id=args.client_id,
            user_id=args.user_id,
            statuses=tuple(JobStatus(s) for s in dict.fromkeys(args.status or ())),
            limit=args.limit,
        )
        return await admin.job_history(jobs, wanted, now)


def _token(settings: Settings, args: argparse.Namespace) -> int:
    """Print a token the local API accepts, so the README's curl flow needs no identity provider."""
    principal = Principal(
        user_id=args.user_id,
        client_id=args.client_id,
        permissions=frozenset(
            Permission(p) for p in args.permission or [Permission.CONTACT_IMPORT_CREATE]
        ),
    )
    audience, issuer = settings.jwt_audience, settings.jwt_issuer
    if args.private_key is not None:
        pem = args.private_key.read_bytes()
        token = mint_token(
            principal, ttl_s=args.ttl, private_key_pem=pem, audience=audience, issuer=issuer
        )
    elif settings.jwt_secret is None:
        raise ConfigurationError("JWT_SECRET is not set (or pass --private-key FILE for RS256)")
    else:
        token = mint_token(
            principal, ttl_s=args.ttl, secret=settings.jwt_secret, audience=audience, issuer=issuer
        )
    sys.stdout.write(token + "\n")
    return 0


def _worker(settings: Settings, args: argparse.Namespace) -> int:
    """Run imports queued through the API until SIGTERM or SIGINT; 0 once drained."""
    _tune_gc()
    uvloop.run(wiring.run_workers(settings, args.workers))
    return 0


def _admin(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job …`` and ``importer dlq …``: one JSON document on stdout; a refusal or a
    failure is one line on stderr and exit 1."""
    try:
        document = uvloop.run(_admin_document(settings, args))
    except ServiceUnreachableError:
        raise  # a configuration error, said by main
    except ImporterError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(orjson.dumps(document).decode() + "\n")
    return 0


async def _admin_document(settings: Settings, args: argparse.Namespace) -> object:
    async with wiring.admin_service(settings) as service:
        if args.command == "job" and args.job_command == "requeue":
            return admin.requeued_document(await service.requeue(None, args.job_id))
        if args.command == "job":
            return admin.removed_document(await service.remove_data(None, args.job_id))
        if args.dlq_command == "list":
            return admin.page_document(await service.dead_letters(None, args.limit))
        return admin.replay_document(await service.replay(None, args.job))


def main(argv: Sequence[str] | None = None) -> int:
    try:  # a bad variable or argument is a usage error, said in one line
        settings = Settings.from_environ(os.environ)
        args = build_parser(settings).parse_args(argv)
        configure_logging(settings.log_format, log_level_for(args.command, settings.log_level))
        failpoints.configure(settings.failpoints)
        return _run(settings, args)
    except ServiceUnreachableError as exc:  # first contact: what was tried, why, what to do
        print(f"importer: {exc.explained()}", file=sys.stderr)
        return 2
    except ImporterError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 2
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 2


def _migrate(settings: Settings, _args: argparse.Namespace) -> int:
    uvloop.run(wiring.run_migrate(settings))
    print("schema applied", file=sys.stderr)
    return 0


def _job(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job resume`` runs the import here; the other job commands are the owner's."""
    if args.job_command == "resume":
        return _resume(settings, args)
    return _admin(settings, args)


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from importer.server import run_server  # FastAPI and uvicorn load only to serve

    _tune_gc()  # the same imports run in this process (serve ran them ~40% slower without)
    return run_server(settings, args.host, args.port)


_COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "db": _migrate,
    "token": _token,
    "worker": _worker,
    "job": _job,
    "dlq": _admin,
    "status": _read,
    "history": _read,
    "serve": _serve,
    "import": _import,
}


def _run(settings: Settings, args: argparse.Namespace) -> int:
    return _COMMANDS[args.command](settings, args)


if __name__ == "__main__":
    raise SystemExit(main())

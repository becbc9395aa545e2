"""``importer``: the command line (argparse; a rich progress bar on a terminal)."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path

import orjson
import uvloop
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from importer import admin, failpoints, runtime
from importer.auth import DEFAULT_TTL_S, MAX_CLIENT_ID, Permission, Principal, mint_token
from importer.exceptions import ConfigurationError, ImporterError
from importer.logs import configure_logging
from importer.models import TERMINAL_STATUSES, ConflictStrategy, Counters, InputFormat, JobStatus
from importer.service import ImportOutcome, ImportRequest, format_for
from importer.settings import Settings
from importer.validate import parse_layout


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="importer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    db = commands.add_parser("db", help="database schema")
    db.add_subparsers(dest="db_command", required=True).add_parser(
        "migrate", help="apply schema.sql (idempotent)"
    )
    imp = commands.add_parser("import", help="import a CSV/JSONL file (plain or .gz)")
    imp.add_argument("path", type=Path)
    imp.add_argument("--client-id", type=int, required=True)
    imp.add_argument(
        "--strategy",
        type=ConflictStrategy.parse,
        default=ConflictStrategy.MERGE,
        help="merge (default) or discard (ignore is accepted as discard)",
    )
    imp.add_argument("--layout", type=Path, help="JSON layout: columns, delimiter, encoding")
    imp.add_argument(
        "--format", choices=[f.value for f in InputFormat], help="default: from the file name"
    )
    imp.add_argument("--chunk-size", type=_positive, default=settings.chunk_size)
    imp.add_argument("--concurrency", type=_positive, default=settings.concurrency)
    imp.add_argument("--errors-out", type=Path, help="write the error report (CSV) here")
    imp.add_argument("--user-id")
    imp.add_argument(
        "--international",
        action="store_true",
        help="phones carry their +country code (no default region)",
    )
    imp.add_argument("--json", action="store_true", help="one JSON object on stdout")
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
    token.add_argument("--client-id", type=_client_id, required=True)
    token.add_argument("--user-id", type=_non_empty, required=True)
    token.add_argument(
        "--permission",
        action="append",
        choices=[p.value for p in Permission],
        help=f"repeatable; default {Permission.CONTACT_IMPORT_CREATE.value}",
    )
    token.add_argument("--ttl", type=_positive, default=DEFAULT_TTL_S, help="seconds")
    token.add_argument("--private-key", type=Path, help="PEM RSA private key: sign with RS256")


def _add_serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="the HTTP API and the job workers (uvicorn, uvloop)")
    serve.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    serve.add_argument("--port", type=_positive, default=8000, help="default 8000")


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
    requeue.add_argument("job_id", type=_job_id)
    resume = job_commands.add_parser(
        "resume",
        help="run a cancelled, failed or abandoned (lease expired) import on in this process from "
        "its checkpoint, with the progress bar (a command-line import: its file at the same path, "
        "with the same size and sha256)",
    )
    resume.add_argument("job_id", type=_job_id)
    resume.add_argument("--errors-out", type=Path, help="write the error report (CSV) here")
    resume.add_argument("--json", action="store_true", help="one JSON object on stdout")
    remove = job_commands.add_parser(
        "remove-data",
        help="soft-delete the contacts an ended import created and clear its ledger (idempotent)",
    )
    remove.add_argument("job_id", type=_job_id)
    dlq = commands.add_parser("dlq", help="the dead-letter queue of chunk messages (RABBITMQ_URL)")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    listing = dlq_commands.add_parser("list", help="look at dead letters without consuming them")
    listing.add_argument("--limit", type=_positive, default=admin.DEFAULT_LIST_LIMIT)
    replay = dlq_commands.add_parser(
        "replay", help="republish the dead letters of running imports to the main queue"
    )
    replay.add_argument("--job", type=_job_id, help="only this import's")


class TerminalProgress:
    """A live bar: rows, rows/s, ETA (by bytes) and invalid rows so far; updated per batch."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("[bold]importing"),
            BarColumn(),
            TextColumn("{task.fields[rows]:>12,} rows"),
            TextColumn("{task.fields[rate]:>9,.0f} rows/s"),
            TimeRemainingColumn(),
            TextColumn("invalid {task.fields[invalid]:,}"),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._started = time.perf_counter()

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
        self._started = time.perf_counter()
        self._task = self._bar.add_task("import", total=bytes_total, rows=0, rate=0.0, invalid=0)

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        if self._task is None:
            return
        elapsed = max(time.perf_counter() - self._started, 1e-6)
        self._bar.update(
            self._task,
            completed=bytes_read,
            rows=counters.rows_read,
            rate=counters.rows_read / elapsed,
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
    return document


def summary_table(outcome: ImportOutcome) -> Table:
    table = Table(title=f"import {outcome.job_id}", show_header=False)
    for key, value in outcome_document(outcome).items():
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
    path = args.path.absolute()  # sealed on the job: `importer job resume` finds it there
    interrupt = runtime.Interrupt()

    def run(progress: TerminalProgress | None) -> Coroutine[None, None, ImportOutcome]:
        def announce(job_id: uuid.UUID) -> None:
            line = f"importer: import {job_id} (if interrupted: `importer job resume {job_id}`)"
            if progress is None:
                print(line, file=sys.stderr)
            else:
                progress.console.print(line, markup=False, highlight=False)

        return runtime.run_import(
            settings, path, request, progress, args.errors_out, interrupt, announce
        )

    return _report(_with_bar(args.json, run), interrupt, args.json)


def _resume(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job resume JOB``: like ``import``; a refusal is one line on stderr, exit 1."""
    _tune_gc()
    interrupt = runtime.Interrupt()

    def run(progress: TerminalProgress | None) -> Coroutine[None, None, ImportOutcome]:
        return runtime.run_resume(settings, args.job_id, progress, args.errors_out, interrupt)

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


def _report(outcome: ImportOutcome, interrupt: runtime.Interrupt, json_out: bool) -> int:
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


def _token(settings: Settings, args: argparse.Namespace) -> int:
    """Print a token the local API accepts, so the README's curl flow needs no identity provider."""
    principal = Principal(
        user_id=args.user_id,
        client_id=args.client_id,
        permissions=frozenset(
            Permission(p) for p in args.permission or [Permission.CONTACT_IMPORT_CREATE]
        ),
    )
    if args.private_key is not None:
        token = mint_token(principal, ttl_s=args.ttl, private_key_pem=args.private_key.read_bytes())
    elif settings.jwt_secret is None:
        raise ConfigurationError("JWT_SECRET is not set (or pass --private-key FILE for RS256)")
    else:
        token = mint_token(principal, ttl_s=args.ttl, secret=settings.jwt_secret)
    sys.stdout.write(token + "\n")
    return 0


def _worker(settings: Settings, args: argparse.Namespace) -> int:
    """Run imports queued through the API until SIGTERM or SIGINT; 0 once drained."""
    _tune_gc()
    uvloop.run(runtime.run_workers(settings, args.workers))
    return 0


def _admin(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job …`` and ``importer dlq …``: one JSON document on stdout; a refusal or a
    failure is one line on stderr and exit 1."""
    try:
        document = uvloop.run(_admin_document(settings, args))
    except ImporterError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(orjson.dumps(document).decode() + "\n")
    return 0


async def _admin_document(settings: Settings, args: argparse.Namespace) -> object:
    async with runtime.admin_service(settings) as service:
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
        configure_logging(settings.log_format, settings.log_level)
        failpoints.configure(settings.failpoints)
        return _run(settings, args)
    except ImporterError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 2
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 2


def _run(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "db":
        uvloop.run(runtime.run_migrate(settings))
        print("schema applied", file=sys.stderr)
        return 0
    if args.command in ("token", "worker"):
        return _token(settings, args) if args.command == "token" else _worker(settings, args)
    if args.command == "job" and args.job_command == "resume":
        return _resume(settings, args)
    if args.command in ("job", "dlq"):
        return _admin(settings, args)
    if args.command == "serve":
        from importer.server import run_server  # FastAPI and uvicorn load only to serve

        _tune_gc()  # the same imports run in this process (serve ran them ~40% slower without)
        return run_server(settings, args.host, args.port)
    return _import(settings, args)


if __name__ == "__main__":
    raise SystemExit(main())

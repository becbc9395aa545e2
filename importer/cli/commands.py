"""The commands' handlers: each takes the settings and the parsed arguments, does its work
through ``importer.wiring`` and returns the exit status; ``run`` picks the handler."""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path

import orjson
import uvloop
from rich.console import Console

from importer import wiring
from importer.cli.database import db_command
from importer.cli.output import (
    TerminalProgress,
    columns_table,
    history_table,
    maintenance_document,
    maintenance_line,
    outcome_document,
    status_table,
    summary_table,
)
from importer.core.errors import (
    ConfigurationError,
    ImporterError,
    JobNotFoundError,
    ServiceUnreachableError,
)
from importer.core.layout import parse_layout
from importer.core.models import TERMINAL_STATUSES, InputFormat, JobStatus
from importer.core.principals import Permission, Principal
from importer.http.auth import mint_token
from importer.services import admin
from importer.services.columns import columns_document
from importer.services.local import ImportOutcome, ImportRequest
from importer.services.runs import format_for
from importer.services.webhooks import set_client_webhook
from importer.settings import Settings


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
        preview=args.dry_run,
        max_invalid=args.max_invalid,
        duplicates_report=args.duplicates_report,
        notify_url=args.notify_url,
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

        reports = wiring.Reports(args.errors_out, args.duplicates_out, args.errors_format)
        return wiring.run_import(settings, path, request, progress, reports, interrupt, announce)

    return _report(_with_bar(args.json, run), interrupt, args.json)


def _resume(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job resume JOB`` and ``importer job apply JOB``: like ``import``; a refusal
    is one line on stderr, exit 1."""
    _tune_gc()
    interrupt = wiring.Interrupt()
    apply = args.job_command == "apply"

    def run(progress: TerminalProgress | None) -> Coroutine[None, None, ImportOutcome]:
        reports = wiring.Reports(args.errors_out, args.duplicates_out, args.errors_format)
        return wiring.run_resume(settings, args.job_id, progress, reports, interrupt, apply=apply)

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
    if outcome.status is JobStatus.READY and outcome.preview is not None:
        print(
            f"importer: import {outcome.job_id} previewed: apply it with"
            f" `importer job apply {outcome.job_id}`",
            file=sys.stderr,
        )
    elif outcome.status is JobStatus.CANCELLED or outcome.status not in TERMINAL_STATUSES:
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


def _inspect(settings: Settings, args: argparse.Namespace) -> int:
    """``importer inspect FILE --client-id N``: the columns step of a local file."""
    layout = None
    if args.layout is not None:
        layout = orjson.loads(args.layout.read_bytes())
        if not isinstance(layout, dict):
            raise ImporterError("the layout file must hold a JSON object")
        parse_layout(layout)  # refused as the import would refuse it
    input_format = InputFormat(args.format) if args.format else format_for(args.path.name)
    step = uvloop.run(
        wiring.inspect_file(settings, args.path, args.client_id, input_format, layout)
    )
    if args.json:
        sys.stdout.write(orjson.dumps(columns_document(None, step)).decode() + "\n")
    else:
        console = Console()
        Console(width=max(console.width, 132) if not console.is_terminal else None).print(
            columns_table(step)
        )
    return 0


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


def _maintenance(settings: Settings, args: argparse.Namespace) -> int:
    """``importer maintenance``: the sweeps once; one summary line (or ``--json``), exit 0; a
    sweep that failed is one line on stderr, exit 1."""
    try:
        done = uvloop.run(wiring.run_maintenance(settings, dt.datetime.now(dt.UTC)))
    except ServiceUnreachableError:
        raise  # a configuration error, said by main
    except ImporterError as exc:
        print(f"importer: maintenance failed: {exc}", file=sys.stderr)
        return 1
    document = maintenance_document(
        done.previews_expired, done.undos_failed, done.swept, done.webhook_attempts
    )
    if args.json:
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    else:
        print(maintenance_line(document))
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
        if args.command == "job" and args.job_command == "undo":
            return admin.undone_document(await service.undo(None, args.job_id))
        if args.command == "job":
            return admin.removed_document(await service.remove_data(None, args.job_id))
        if args.command == "client":
            return await _client_webhook(settings, args)
        if args.dlq_command == "list":
            return admin.page_document(await service.dead_letters(None, args.limit))
        return admin.replay_document(await service.replay(None, args.job))


async def _client_webhook(settings: Settings, args: argparse.Namespace) -> object:
    async with wiring.client_webhooks(settings) as (store, resolver):
        webhook = await set_client_webhook(
            store,
            resolver,
            settings,
            args.client_id,
            notify_url=args.url,
            secret=args.secret,
            new_secret=args.new_secret,
        )
    return {
        "client_id": webhook.client_id,
        "notify_url": webhook.notify_url,
        "secret": webhook.secret,
    }


def _job(settings: Settings, args: argparse.Namespace) -> int:
    """``importer job resume`` runs the import here; the other job commands are the owner's."""
    if args.job_command in ("resume", "apply"):
        return _resume(settings, args)
    return _admin(settings, args)


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from importer.server import run_server  # FastAPI and uvicorn load only to serve

    _tune_gc()  # the same imports run in this process (serve ran them ~40% slower without)
    return run_server(settings, args.host, args.port)


_COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "db": db_command,
    "token": _token,
    "worker": _worker,
    "job": _job,
    "dlq": _admin,
    "client": _admin,
    "status": _read,
    "history": _read,
    "inspect": _inspect,
    "serve": _serve,
    "import": _import,
    "maintenance": _maintenance,
}


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status."""
    return _COMMANDS[args.command](settings, args)

"""``importer``'s arguments: the parser of every command, the argument types, help texts and
epilogs (``importer COMMAND --help`` says what this module holds)."""

from __future__ import annotations

import argparse
import importlib.metadata
import uuid
from pathlib import Path

from importer.core.config import MAX_CHUNK_SIZE
from importer.core.errors import ConfigurationError
from importer.core.models import ConflictStrategy, InputFormat, JobStatus
from importer.core.principals import Permission
from importer.core.threshold import parse_max_invalid
from importer.core.webhooks import parse_notify_url
from importer.http.auth import DEFAULT_TTL_S, MAX_CLIENT_ID
from importer.services import admin
from importer.services.local import S3_SCHEME, S3Location, parse_s3_url
from importer.settings import Settings


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _chunk_size(raw: str) -> int:
    value = _positive(raw)
    if value > MAX_CHUNK_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CHUNK_SIZE}")
    return value


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="importer",
        description="Import contact lists (CSV, JSONL, gzip) into PostgreSQL, exactly; serve the "
        "HTTP API and its workers; look after imports.",
        epilog="`importer COMMAND --help` describes a command's options and their defaults.",
    )
    parser.add_argument(
        "--version", action="version", version=f"importer {importlib.metadata.version('importer')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_db_parsers(commands)
    _add_import_parser(commands, settings)
    _add_read_parsers(commands)
    _add_inspect_parser(commands)
    _add_token_parser(commands)
    _add_serve_parser(commands)
    _add_admin_parsers(commands)
    _add_maintenance_parser(commands)
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


DB_EPILOG = """\
DATABASE_URL names your PostgreSQL. Unset, every command uses the embedded PostgreSQL (the
importer[embedded] extra): its data in IMPORTER_DATA_DIR (default ./var/postgres), a Unix socket
in that directory and no TCP port; the first command creates and starts it, it keeps running
until `importer db stop`. As root it runs as the system user embedded_postgres.
"""


def _add_db_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = commands.add_parser(
        "db",
        help="the database: schema, and the embedded server's state",
        epilog=DB_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = db.add_subparsers(dest="db_command", required=True)
    actions.add_parser("migrate", help="apply schema.sql (idempotent)")
    for name, text in (
        ("status", "which database, and whether it runs (exit 3 when it does not)"),
        ("start", "start the embedded server (creating it if need be) and show its status"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("--json", action="store_true", help="one JSON object on stdout")
    actions.add_parser("stop", help="stop the embedded server (DATABASE_URL unset)")
    check = actions.add_parser(
        "check",
        help="report what other writers left that the importer cannot use as is: legacy "
        "duplicates, invalid keys, unnormalized channels (exit 1 when any)",
    )
    check.add_argument("--client-id", type=_positive, help="one client's rows only")
    check.add_argument(
        "--format", choices=("csv", "json"), default="csv", help="on stdout (default csv)"
    )


IMPORT_EPILOG = """\
environment: DATABASE_URL (the database), IMPORTER_CHUNK_SIZE and IMPORTER_CONCURRENCY (the
defaults above), S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (for
s3:// sources), IMPORTER_LOG_LEVEL (default warning), IMPORTER_LOG_FORMAT (console or json).
exit status: 0 the job completed, 1 it failed, 2 a usage or configuration error (a service
that does not answer included).
"""


def _max_invalid(raw: str) -> str:
    try:
        return str(parse_max_invalid(raw))
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _notify_url(raw: str) -> str:
    try:
        return parse_notify_url(raw)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        type=_chunk_size,
        default=settings.chunk_size,
        metavar="N",
        help="rows per chunk, one transaction each (1 to 1000000; default %(default)s, "
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
    _errors_format(imp)
    imp.add_argument(
        "--duplicates-out",
        type=Path,
        metavar="FILE",
        help="write the duplicate-resolution report here as CSV: key, field, winner_value, "
        "winner_line (a line or stored), losing_lines, rule, formula-safe (default: none written)",
    )
    imp.add_argument(
        "--no-duplicates-report",
        dest="duplicates_report",
        action="store_false",
        help="compute and keep no duplicate-resolution report (default: kept)",
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
        "--dry-run",
        action="store_true",
        help="preview: read, validate and plan the whole file against the client's contacts, "
        "write none, and leave the import ready with what it would do (apply it with "
        "`importer job apply JOB`)",
    )
    imp.add_argument(
        "--max-invalid",
        type=_max_invalid,
        metavar="N|P%",
        help="fail (too_many_invalid_rows) before writing any contact when more rows than this "
        "count or percentage are invalid; the whole file is validated first (default: no limit)",
    )
    imp.add_argument(
        "--notify-url",
        type=_notify_url,
        metavar="URL",
        help="the completion webhook: the job document is POSTed here when the import ends, "
        "signed with the client's webhook secret (`importer client webhook`); https to a public "
        "address only unless IMPORTER_WEBHOOK_ALLOW_PRIVATE (default: the client's default "
        "notify_url); delivered by a running `importer serve` or `importer worker`",
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


def _add_inspect_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``importer inspect``: the API's columns step for a local file."""
    inspect = commands.add_parser(
        "inspect",
        help="a file's columns: samples and the suggested target of each (reads the head only)",
        description="Show each column of a file with up to 5 sample values and the target the\n"
        "columns step suggests (and why: memory, alias, custom_field, values), for a client\n"
        "(its custom fields and remembered headers, from DATABASE_URL). Write the mapping you\n"
        'want as a layout ({"columns": [{"column": 2, "target": "whatsapp"}]}) for --layout.',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("path", type=Path, metavar="FILE", help="a local CSV/JSONL/XLSX file")
    inspect.add_argument(
        "--client-id", type=_client_id, required=True, metavar="N", help="the tenant (required)"
    )
    inspect.add_argument(
        "--format",
        choices=[f.value for f in InputFormat],
        help="the file's format (default: from its name)",
    )
    inspect.add_argument(
        "--layout",
        type=Path,
        metavar="FILE",
        help="a layout (delimiter, encoding, header, sheet) to read the file with; its columns "
        "are shown as the current targets",
    )
    inspect.add_argument("--json", action="store_true", help="print the API's columns document")


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


MAINTENANCE_EPILOG = """\
The workers' sweeps, once (see docs/OPERATIONS.md, Bounded tables): expire previews, fail
stale undos, purge imports past IMPORTER_RETENTION_DAYS, delete old outbox messages and webhook
deliveries, attempt the deliveries due. For a command-line deployment (deploy/: a systemd
timer). exit status: 0 done, 1 a sweep failed, 2 a usage or configuration error.
"""


def _add_maintenance_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    maintenance = commands.add_parser(
        "maintenance",
        help="run the workers' sweeps once (retention, preview expiry, webhook delivery)",
        epilog=MAINTENANCE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    maintenance.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _job_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an import id: {raw!r}") from None


def _add_client_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``importer client webhook``: a client's completion webhook settings (the owner's)."""
    client = commands.add_parser("client", help="a client's settings (no token needed)")
    client_commands = client.add_subparsers(dest="client_command", required=True)
    webhook = client_commands.add_parser(
        "webhook",
        help="set a client's webhook secret and default notify_url; prints them (JSON)",
    )
    webhook.add_argument("--client-id", type=_client_id, required=True, help="the client")
    webhook.add_argument(
        "--url", help="its imports' default notify_url (default: none; a create's own wins)"
    )
    secret = webhook.add_mutually_exclusive_group()
    secret.add_argument("--secret", help="the signing secret (16+ characters)")
    secret.add_argument("--new-secret", action="store_true", help="a new random secret (rotation)")


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
    _errors_format(resume)
    resume.add_argument(
        "--duplicates-out", type=Path, help="write the duplicate-resolution report (CSV) here"
    )
    resume.add_argument("--json", action="store_true", help="one JSON object on stdout")
    apply = job_commands.add_parser(
        "apply",
        help="import a preview (`importer import --dry-run`, or `preview` on the API) resting in "
        "ready, in this process, planned again against the contacts as they are now",
    )
    apply.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    apply.add_argument("--errors-out", type=Path, help="write the error report (CSV) here")
    _errors_format(apply)
    apply.add_argument(
        "--duplicates-out", type=Path, help="write the duplicate-resolution report (CSV) here"
    )
    apply.add_argument("--json", action="store_true", help="one JSON object on stdout")
    undo = job_commands.add_parser(
        "undo",
        help="take an ended import back: the client's contacts as they were before it (created "
        "ones soft-deleted, overwritten values restored, added channels and unused new custom "
        "fields removed); refused (exit 1) when a later write changed what it would restore; "
        "run it again to resume one that stopped",
    )
    undo.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    undo.add_argument("--json", action="store_true", help="one JSON object on stdout (default)")
    remove = job_commands.add_parser(
        "remove-data",
        help="soft-delete the contacts an ended import created and clear its ledger (idempotent)",
    )
    remove.add_argument("job_id", type=_job_id, metavar="JOB", help="the import's id")
    _add_client_parser(commands)
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


def _errors_format(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--errors-format",
        choices=("csv", "source"),
        default="csv",
        help="--errors-out as the report (csv: line, column, reason, severity, value) or as the "
        "rejected rows as they were sent, with a leading importer_error column, to fix and "
        "import again (source) (default %(default)s)",
    )

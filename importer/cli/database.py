"""Which database a command uses, and the ``importer db`` commands.

``DATABASE_URL`` names the user's own server; unset, the command uses the embedded PostgreSQL
(``importer.adapters.embedded``), started on first use in ``IMPORTER_DATA_DIR``; each command
that uses it says so once on stderr (``resolved``).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from collections import Counter
from pathlib import Path

import orjson
import uvloop

from importer import wiring
from importer.adapters import embedded
from importer.adapters.postgres.check import legacy_findings
from importer.adapters.postgres.pool import migrate, server_version
from importer.core.errors import ConfigurationError
from importer.core.legacy import CSV_HEADER, Finding
from importer.core.unreachable import mask_url
from importer.settings import Settings

# Commands that never open the database.
_WITHOUT_DATABASE = {"token"}
_DB_COMMANDS_WITHOUT_START = {"status", "stop"}


def needs_database(args: argparse.Namespace) -> bool:
    if args.command in _WITHOUT_DATABASE:
        return False
    return not (args.command == "db" and args.db_command in _DB_COMMANDS_WITHOUT_START)


def resolved(settings: Settings) -> Settings:
    """``settings`` with the database the command uses: DATABASE_URL as set (the user chose it;
    ``importer db status`` shows it), else the embedded server, started if need be and said once
    on stderr (a user who set nothing learns where the data goes)."""
    if not settings.embedded:
        return settings
    data_dir = Path(settings.data_dir)
    server = embedded.ensure_running(data_dir, on_start=_migrate)
    print(embedded.describe(server.data_dir), file=sys.stderr)
    return dataclasses.replace(settings, database_url=server.url)


def _migrate(server: embedded.EmbeddedServer) -> None:
    """The embedded database is the importer's own: its schema is applied whenever it starts."""
    uvloop.run(migrate(server.url))


def db_command(settings: Settings, args: argparse.Namespace) -> int:
    if args.db_command == "migrate":
        uvloop.run(wiring.run_migrate(settings))
        print("schema applied", file=sys.stderr)
        return 0
    if args.db_command == "start":
        return _status(settings, json_out=args.json)
    if args.db_command == "stop":
        return _stop(settings)
    if args.db_command == "check":
        return uvloop.run(_check(settings, args.client_id, args.format))
    return _status(settings, json_out=args.json)


def _status(settings: Settings, *, json_out: bool) -> int:
    """The database and its state: 0 when it answers (running), 3 when it does not."""
    if settings.embedded:
        document = embedded.status(Path(settings.data_dir)).document()
    else:
        document = {"database": "DATABASE_URL", "url": mask_url(settings.database_url)}
        try:
            document |= {
                "state": "running",
                "version": uvloop.run(server_version(settings.database_url)),
            }
        except Exception as exc:  # noqa: BLE001  # any failure is the state to report
            document |= {"state": "unreachable", "error": str(exc).splitlines()[0]}
    if json_out:
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    else:
        print(_status_line(document))
    return 0 if document["state"] == "running" else 3


def _status_line(document: dict[str, object]) -> str:
    if document["database"] == "embedded":
        where = f"embedded PostgreSQL in {document['data_dir']}"
        if document["state"] == "running":
            return (
                f"{where}: running (PostgreSQL {document['version']}, pid {document['pid']}, "
                f"socket in {document['socket_dir']})\n  url: {document['url']}"
            )
        if document["state"] == "stopped":
            return f"{where}: stopped (the next command starts it)"
        return f"{where}: not created yet (the next command creates and starts it)"
    if document["state"] == "running":
        return f"{document['url']} (DATABASE_URL): running (PostgreSQL {document['version']})"
    return f"{document['url']} (DATABASE_URL): unreachable ({document['error']})"


async def _check(settings: Settings, client_id: int | None, form: str) -> int:
    """``importer db check``: the findings on stdout (CSV or JSON), their counts on stderr; exit
    0 when there are none, 1 when there are."""
    counts: Counter[str] = Counter()
    findings = legacy_findings(settings.database_url, client_id)
    if form == "csv":
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(CSV_HEADER)
        async for found in findings:
            counts[found.kind.value] += 1
            out.writerow(found.cells())
    else:
        documents = []
        async for found in findings:
            counts[found.kind.value] += 1
            documents.append(found.document())
        body = {
            "counts": {kind.value: counts[kind.value] for kind in Finding},
            "findings": documents,
        }
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
    said = ", ".join(f"{counts[kind.value]} {kind.value}" for kind in Finding)
    print(f"db check: {said}", file=sys.stderr)
    return 1 if counts else 0


def _stop(settings: Settings) -> int:
    if not settings.embedded:
        raise ConfigurationError(
            "importer db stop stops the embedded PostgreSQL only, and DATABASE_URL names your own "
            "server: unset DATABASE_URL to stop the embedded one"
        )
    data_dir = Path(settings.data_dir)
    stopped = embedded.stop(data_dir)
    shown = embedded.status(data_dir).data_dir
    print(f"embedded PostgreSQL in {shown}: {'stopped' if stopped else 'was not running'}")
    return 0

"""``importer``: the command line (argparse; a rich progress bar on a terminal).

``parser`` builds the arguments, ``commands`` holds the handlers (through ``importer.wiring``),
``output`` the bar and the tables; ``main`` (the ``importer`` script, ``python -m importer``)
turns a usage or configuration error into one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import orjson

from importer.cli.commands import run
from importer.cli.database import needs_database, resolved
from importer.cli.parser import build_parser
from importer.core import failpoints
from importer.core.errors import ImporterError, ServiceUnreachableError
from importer.logs import configure_logging
from importer.settings import Settings, log_level_for

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:  # a bad variable or argument is a usage error, said in one line
        settings = Settings.from_environ(os.environ)
        args = build_parser(settings).parse_args(argv)
        configure_logging(settings.log_format, log_level_for(args.command, settings.log_level))
        failpoints.configure(settings.failpoints)
        if needs_database(args):
            settings = resolved(settings)
        return run(settings, args)
    except ServiceUnreachableError as exc:  # first contact: what was tried, why, what to do
        print(f"importer: {exc.explained()}", file=sys.stderr)
        return 2
    except ImporterError as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 2
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"importer: {exc}", file=sys.stderr)
        return 2

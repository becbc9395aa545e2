"""First contact: what to say when a configured service does not answer (pure).

The adapters raise :class:`importer.core.errors.ServiceUnreachableError` when they cannot connect;
the command line's edge turns it into one message saying what was tried (the URL, its password
masked), why it failed, and what to do.
"""

from __future__ import annotations

import re
import urllib.parse

MASK = "***"
# A libpq keyword DSN's password (``host=h password=secret``), quoted or not.
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)

# service → (the variable naming it, what to do: one line each)
HINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "PostgreSQL": (
        "DATABASE_URL",
        (
            "point DATABASE_URL at a running server:",
            "  export DATABASE_URL=postgresql://USER:PASSWORD@HOST:5432/DATABASE",
            "or start a local one as the README's set-up expects (PostgreSQL on 127.0.0.1:5432,",
            "trust auth; `docker compose up -d postgres`), then run `importer db migrate`",
        ),
    ),
    "RabbitMQ": (
        "RABBITMQ_URL",
        (
            "start the broker (`docker compose up -d rabbitmq`) or point RABBITMQ_URL at it:",
            "  export RABBITMQ_URL=amqp://USER:PASSWORD@HOST:5672/",
            "or unset RABBITMQ_URL to run one instance without a broker",
        ),
    ),
    "Redis": (
        "REDIS_URL",
        (
            "start Redis (`docker compose up -d redis`) or point REDIS_URL at it",
            "(redis://HOST:6379/0); it is optional: unset REDIS_URL to run without it",
        ),
    ),
    "S3": (
        "S3_ENDPOINT_URL",
        (
            "start the object store (`docker compose up -d minio`) or point S3_ENDPOINT_URL",
            "at it (with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION); without",
            "S3_ENDPOINT_URL files stay in the local directory IMPORTER_STORAGE_DIR",
        ),
    ),
}


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (user, host, port, path and query kept).

    A libpq keyword DSN (``host=… password=…``) gets its password masked; a URL that does not
    parse (a bad port) gets everything between the scheme and the last ``@`` masked.
    """
    if "://" not in url:
        return _KEYWORD_PASSWORD.sub(rf"\g<1>{MASK}", url)
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a malformed port)
    except ValueError:
        return _mask_credentials(url)
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{name}:{MASK}@{host}"))


def _mask_credentials(text: str) -> str:
    head, at, tail = text.rpartition("@")
    if not at:
        return text
    scheme, sep, _ = head.partition("://")
    return f"{scheme}{sep}{MASK}@{tail}" if sep else f"{MASK}@{tail}"


def explain(service: str, url: str, cause: str) -> str:
    """The message for a service that does not answer: what was tried, why, what to do."""
    variable, hint = HINTS.get(service, ("", ("check its configuration",)))
    named = f" ({variable})" if variable else ""
    todo = "\n         ".join(hint)
    return f"cannot reach {service} at {mask_url(url)}{named}\n  cause: {cause}\n  to do: {todo}"

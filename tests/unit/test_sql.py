"""The SQL files: named blocks parse, every block is parameterized, every name used is defined
(and every one defined is used), and a name defined in two query files is refused."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import importer
from importer.sql import (
    DuplicateQueryError,
    load_queries,
    merge_queries,
    parse_queries,
    queries,
    schema,
)

PACKAGE = Path(importer.__file__).resolve().parent


def test_named_blocks() -> None:
    parsed = parse_queries("-- name: a\nSELECT 1;\n-- name: b\nSELECT $1;\n")
    assert parsed == {"a": "SELECT 1;", "b": "SELECT $1;"}


def test_shipped_queries_load() -> None:
    names = set(queries())
    assert {
        "find_contacts",
        "record_batch",
        "finalize_job",
        "transition_job",
    } <= names
    assert "CREATE TABLE IF NOT EXISTS contact" in schema()


def test_schema_is_idempotent_by_construction() -> None:
    dropped_views: set[str] = set()
    for line in schema().splitlines():
        stripped = line.strip().upper()
        if stripped.startswith("DROP VIEW IF EXISTS "):
            dropped_views.add(stripped.removeprefix("DROP VIEW IF EXISTS ").rstrip(";"))
        if stripped.startswith("CREATE VIEW "):  # recreated: dropped just before
            assert stripped.split()[2] in dropped_views, line
        elif stripped.startswith("CREATE OR REPLACE "):  # functions and triggers: replaced
            pass
        elif stripped.startswith("CREATE "):  # ALTER SEQUENCE … CACHE is idempotent by nature
            assert "IF NOT EXISTS" in stripped, line
        if stripped.startswith("ALTER TABLE") and " ADD COLUMN " in stripped:
            assert "ADD COLUMN IF NOT EXISTS" in stripped, line
        if stripped.startswith("DROP "):
            assert "IF EXISTS" in stripped, line


def test_job_queries_ship() -> None:
    assert {
        "record_batch_fenced",
        "claim_job",
        "renew_lease",
        "release_lease",
        "start_job",
        "view_job",
        "list_jobs",
        "list_user_jobs",
    } <= set(queries())


# --- one name, one file --------------------------------------------------------------------


def test_a_name_in_two_files_is_refused_naming_both() -> None:
    texts = [
        ("queries/jobs.sql", "-- name: get_job\nSELECT 1;\n-- name: other\nSELECT 2;\n"),
        ("queries/views.sql", "-- name: view_job\nSELECT 3;\n-- name: get_job\nSELECT 4;\n"),
    ]
    with pytest.raises(DuplicateQueryError, match="get_job") as refused:
        merge_queries(texts)
    assert "queries/jobs.sql" in str(refused.value)
    assert "queries/views.sql" in str(refused.value)


def test_the_loader_refuses_a_name_in_two_files(tmp_path: Path) -> None:
    folder = tmp_path / "queries"
    folder.mkdir()
    (folder / "a.sql").write_text("-- name: one\nSELECT 1;\n-- name: two\nSELECT 2;\n", "utf-8")
    (folder / "b.sql").write_text("-- name: two\nSELECT 22;\n", "utf-8")
    (folder / "notes.txt").write_text("-- name: one\nnot a query file\n", "utf-8")
    with pytest.raises(DuplicateQueryError) as refused:
        load_queries(folder)
    assert str(refused.value) == "query 'two' is defined in both queries/a.sql and queries/b.sql"
    (folder / "b.sql").write_text("-- name: three\nSELECT 3;\n", "utf-8")
    assert load_queries(folder) == {"one": "SELECT 1;", "two": "SELECT 2;", "three": "SELECT 3;"}


def test_a_name_twice_in_one_file_is_refused() -> None:
    with pytest.raises(DuplicateQueryError, match=r"'a' is defined twice in queries/x\.sql"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n", "queries/x.sql")


def test_files_merge_into_one_mapping() -> None:
    merged = merge_queries(
        [("a.sql", "-- name: a\nSELECT 1;\n"), ("b.sql", "-- name: b\nSELECT 2;\n")]
    )
    assert merged == {"a": "SELECT 1;", "b": "SELECT 2;"}


def test_every_query_file_holds_blocks() -> None:
    for path in sorted((PACKAGE / "sql" / "queries").glob("*.sql")):
        assert parse_queries(path.read_text("utf-8"), path.name), path


# --- the names the Python code uses ----------------------------------------------------------
# A use is a subscript (or .get) of the mapping ``queries()`` returns: on the call itself, or on
# any name or attribute assigned from it anywhere under importer/ (``self._q = queries()``). The
# key is a string literal, or a local variable whose every assignment in the enclosing function
# gives string literals (``query = "a" if x else "b"``, ``query, args = ("a", (…))``). Any other
# key is reported unresolved: teach this scan the new form rather than skip it.


class _Uses:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.unresolved: list[str] = []


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text("utf-8"), str(path))


def _is_queries_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "queries") or (
        isinstance(func, ast.Attribute) and func.attr == "queries"
    )


def _mapping_holders(modules: list[tuple[Path, ast.Module]]) -> set[str]:
    """The names and attributes (as source text) assigned ``queries()`` anywhere."""
    holders: set[str] = set()
    for _, module in modules:
        for node in ast.walk(module):
            if isinstance(node, ast.Assign) and _is_queries_call(node.value):
                holders.update(ast.unparse(t) for t in node.targets)
            elif isinstance(node, ast.AnnAssign) and node.value and _is_queries_call(node.value):
                holders.add(ast.unparse(node.target))
    return holders


def _strings(node: ast.expr) -> set[str] | None:
    """The string literals an expression evaluates to, or None when it is not only literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        body, orelse = _strings(node.body), _strings(node.orelse)
        return None if body is None or orelse is None else body | orelse
    return None


def _assigned(target: ast.expr, value: ast.expr, variable: str) -> list[ast.expr] | None:
    """The expressions ``target = value`` gives ``variable`` ([] when it gives it none)."""
    if isinstance(target, ast.Name):
        return [value] if target.id == variable else []
    if not isinstance(target, ast.Tuple):
        return []
    if isinstance(value, ast.IfExp):
        body, orelse = (
            _assigned(target, value.body, variable),
            _assigned(target, value.orelse, variable),
        )
        return None if body is None or orelse is None else body + orelse
    found: list[ast.expr] = []
    for i, element in enumerate(target.elts):
        if isinstance(element, ast.Name) and element.id == variable:
            if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts):
                return None
            found.append(value.elts[i])
    return found


def _resolve(scope: ast.AST, variable: str) -> set[str] | None:
    """Every string a local variable of ``scope`` is assigned, or None when one is not literal."""
    names: set[str] = set()
    values: list[ast.expr] = []
    for node in ast.walk(scope):
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.For) and ast.unparse(node.target) == variable:
            if not isinstance(node.iter, ast.Tuple | ast.List):
                return None
            values.extend(node.iter.elts)
        for target, value in pairs:
            given = _assigned(target, value, variable)
            if given is None:
                return None
            values.extend(given)
    for value in values:
        strings = _strings(value)
        if strings is None:
            return None
        names |= strings
    return names or None


def _key(node: ast.Subscript | ast.Call) -> ast.expr | None:
    if isinstance(node, ast.Subscript):
        return node.slice
    return node.args[0] if node.args else None


def _lookups(module: ast.Module, holders: set[str]) -> Iterator[tuple[ast.AST, ast.expr, int]]:
    """(enclosing scope, key, line) of every look-up in the query mapping."""
    scopes: list[ast.AST] = [module]
    scopes += [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    seen: set[int] = set()
    for scope in reversed(scopes):  # innermost first: a nested function is its own scope
        for node in ast.walk(scope):
            mapping: ast.expr | None = None
            if isinstance(node, ast.Subscript):
                mapping = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                mapping = node.func.value if node.func.attr == "get" else None
            if mapping is None or id(node) in seen:
                continue
            if _is_queries_call(mapping) or ast.unparse(mapping) in holders:
                seen.add(id(node))
                assert isinstance(node, ast.Subscript | ast.Call)
                key = _key(node)
                if key is not None:
                    yield scope, key, node.lineno


def _query_uses() -> _Uses:
    modules = list(_modules())
    holders = _mapping_holders(modules)
    uses = _Uses()
    for path, module in modules:
        for scope, key, line in _lookups(module, holders):
            strings = _strings(key)
            if strings is None and isinstance(key, ast.Name):
                strings = _resolve(scope, key.id)
            if strings is None:
                uses.unresolved.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
            else:
                uses.names |= strings
    return uses


def test_the_scan_finds_the_uses() -> None:
    uses = _query_uses()
    assert not uses.unresolved, f"query look-ups the scan cannot read: {uses.unresolved}"
    assert {"record_batch", "view_any_job", "list_user_jobs", "lock_outbox", "ping"} <= uses.names


def test_every_query_used_is_defined() -> None:
    missing = _query_uses().names - set(queries())
    assert not missing, f"used under importer/ but defined in no queries/*.sql: {sorted(missing)}"


def test_every_query_defined_is_used() -> None:
    dead = set(queries()) - _query_uses().names
    assert not dead, f"defined in queries/*.sql but used nowhere under importer/: {sorted(dead)}"

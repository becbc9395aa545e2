"""Scale and concurrency against the reference model (catalog T18, T19).

T18 (slow tier, 1M rows): MERGE and DISCARD with 4 consumers and chunks of 500: the counters
equal the generator's oracle, every key once, and every final value equal to the reference
model's (last non-empty by line). T19: two imports of one client with 50% overlapping keys,
started together: no key twice, inserted summed over both equals the distinct keys, and each
key ends as one of the two serial orders would leave it (the documented rule: per key, the
later commit wins) — 20k rows in the default run, 1M in the slow tier.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.generate import GenerationStats, generate
from benchmarks.run import valid_rows
from importer.core.models import ConflictStrategy
from importer.core.reference import ReferenceModel
from tests.support import db_state, fetch, import_file

pytestmark = pytest.mark.acceptance


def _reference(paths: list[Path], strategy: ConflictStrategy) -> ReferenceModel:
    model = ReferenceModel()
    for path in paths:
        model.apply(1, valid_rows(path), strategy)
    return model


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", [ConflictStrategy.MERGE, ConflictStrategy.DISCARD])
async def test_a_million_rows_match_the_oracle_and_the_reference_model(
    db_dsn: str, tmp_path: Path, strategy: ConflictStrategy
) -> None:
    path = tmp_path / "million.csv"
    stats = await asyncio.to_thread(generate, 1_000_000, 18, path, write_meta=False)
    outcome = await import_file(db_dsn, path, 1, strategy, chunk_size=500, concurrency=4)
    c = outcome.counters
    repeated = c.updated if strategy is ConflictStrategy.MERGE else c.ignored
    assert (c.rows_read, c.inserted, repeated, c.invalid, c.error) == (
        stats.rows,
        stats.distinct_keys,
        stats.repeated_rows,
        stats.bad_check_digits,
        0,
    )
    count = await fetch(db_dsn, "SELECT count(*) AS n FROM contact WHERE client_id = 1")
    assert count[0]["n"] == stats.distinct_keys
    expected = await asyncio.to_thread(lambda: _reference([path], strategy).client_state(1))
    assert await db_state(db_dsn, 1) == expected


def _overlapping_files(tmp_path: Path, rows: int) -> tuple[Path, Path, GenerationStats]:
    """A: ``rows`` generated rows. B: A's second half in reverse line order (the same keys; a
    key repeated there ends with another row's values than in A, so the two serial orders
    differ) followed by as many rows of another seed: half of B's rows are A's keys."""
    a, other = tmp_path / "a.csv", tmp_path / "other.csv"
    stats = generate(rows, 19, a, write_meta=False)
    generate(rows // 2, 20, other, write_meta=False)
    a_lines = a.read_bytes().splitlines(keepends=True)
    other_lines = other.read_bytes().splitlines(keepends=True)
    b = tmp_path / "b.csv"
    second_half = a_lines[1 + rows // 2 :]
    b.write_bytes(b"".join([a_lines[0], *reversed(second_half), *other_lines[1:]]))
    return a, b, stats


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param(20_000),
        pytest.param(1_000_000, marks=[pytest.mark.slow, pytest.mark.timeout(1800)]),
    ],
)
async def test_two_imports_of_one_client_with_overlapping_keys_serialize_per_key(
    db_dsn: str, tmp_path: Path, rows: int
) -> None:
    a, b, _ = await asyncio.to_thread(_overlapping_files, tmp_path, rows)
    both = await asyncio.gather(
        import_file(db_dsn, a, 1, chunk_size=500, concurrency=4),
        import_file(db_dsn, b, 1, chunk_size=500, concurrency=4),
    )
    assert not await fetch(  # I2
        db_dsn, "SELECT cpf_cnpj FROM contact WHERE client_id = 1 GROUP BY 1 HAVING count(*) > 1"
    )
    a_then_b = await asyncio.to_thread(
        lambda: _reference([a, b], ConflictStrategy.MERGE).client_state(1)
    )
    b_then_a = await asyncio.to_thread(
        lambda: _reference([b, a], ConflictStrategy.MERGE).client_state(1)
    )
    assert sum(o.counters.inserted for o in both) == len(a_then_b)  # each key inserted once
    for outcome in both:
        assert outcome.counters.balanced
        assert outcome.counters.error == 0
    state = await db_state(db_dsn, 1)
    assert state.keys() == a_then_b.keys()
    mismatched = [k for k, v in state.items() if v not in (a_then_b[k], b_then_a[k])]
    assert not mismatched, mismatched[:5]
    assert any(a_then_b[k] != b_then_a[k] for k in a_then_b)  # the orders do disagree

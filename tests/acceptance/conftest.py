"""Fixtures of the acceptance tier."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.generate import generate

ROWS = 5000
SEED = 20_261_129


@dataclass(frozen=True)
class Contacts:
    path: Path
    rows: int


@pytest.fixture(scope="module")
def contacts(tmp_path_factory: pytest.TempPathFactory) -> Contacts:
    """A generated contacts file (seeded: the same every run)."""
    path = tmp_path_factory.mktemp("contacts") / "contacts.csv"
    stats = generate(ROWS, SEED, path, write_meta=False)
    return Contacts(path, stats.rows)

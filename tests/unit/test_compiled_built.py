"""The compiled hot path is built wherever the package is installed (the README's set-up command
builds it): every ``importer/**/_*.pyx`` imports as an extension module, not as Python."""

from __future__ import annotations

import importlib
import importlib.machinery
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "importer"
SOURCES = sorted(PACKAGE.rglob("_*.pyx"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_cython_source_is_built(source: Path) -> None:
    name = ".".join(source.relative_to(PACKAGE.parent).with_suffix("").parts)
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), module.__file__


def test_every_cython_source_has_a_typing_stub() -> None:
    assert [s for s in SOURCES if not s.with_suffix(".pyi").is_file()] == []

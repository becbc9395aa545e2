"""Both CSV readers for the reader tests: the pure CsvReader and, when built, the compiled one.

A test module imports ``CsvReader`` as usual and adds ``pytest_generate_tests =
csv_reader_tests(globals())``: each of its tests that names CsvReader (or a helper of the module
that builds one) then runs once per reader, with the module's ``CsvReader`` bound to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from importer.read.csvfile import CsvReader

try:
    from importer.read._csvfast import FastCsvReader

    READERS: list[type[CsvReader]] = [CsvReader, FastCsvReader]
except ImportError:  # not built: the pure reader only
    READERS = [CsvReader]


def csv_reader_tests(
    namespace: dict[str, Any], *helpers: str
) -> tuple[Callable[[pytest.Metafunc], None], Any]:
    """The module's pytest_generate_tests and its autouse fixture binding CsvReader."""
    names = ("CsvReader", *helpers)

    def generate(metafunc: pytest.Metafunc) -> None:
        source = inspect.getsource(metafunc.function)
        if any(name in source for name in names):
            ids = [cls.__name__ for cls in READERS]
            metafunc.parametrize("csv_reader", READERS, ids=ids, indirect=True, scope="module")

    @pytest.fixture(autouse=True, scope="module")
    def csv_reader(request: pytest.FixtureRequest) -> Iterator[type[CsvReader]]:
        cls = getattr(request, "param", CsvReader)
        namespace["CsvReader"] = cls
        yield cls
        namespace["CsvReader"] = CsvReader

    return generate, csv_reader

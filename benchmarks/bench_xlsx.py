"""python-calamine vs openpyxl's read-only mode on a generated contact sheet.

Usage: .venv/bin/python benchmarks/bench_xlsx.py [--rows N] [--keep PATH]

Writes a workbook of N rows (default 200,000) and 8 columns with openpyxl's write-only mode --
a header, then name, CPF and phone as numbers, e-mail and city as text, a birth date, a boolean,
a sparse note -- laid out as Excel saves it (strings in the shared-strings table, a
``<dimension>``: tests/xlsx_support.py), and reads it back with each library in a fresh
subprocess, so that each figure is that library's alone (python-calamine is not a dependency:
``pip install python-calamine`` to run this):

* wall and CPU seconds to read every row's values;
* seconds to the first row (what "streaming" means to a pipeline that must start cutting
  chunks before the end of the sheet);
* peak RSS of the subprocess (``ru_maxrss``), and its growth over the interpreter's baseline;
* the same at N/4 rows: an RSS that grows with the rows is not streaming.

It also prints what each library hands back for a numeric, a date, a boolean and an empty cell,
and reads a hostile two-cell workbook (A1 and XFD1048576, a few KB) with each, in a subprocess
limited to 4 GiB of address space.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests import xlsx_support

HEADER = ["nome", "cpf", "telefone", "email", "cidade", "nascimento", "ativo", "obs"]
CITIES = ["São Paulo", "Rio de Janeiro", "Belo Horizonte", "Curitiba", "Recife", "Goiânia"]
FIRST = ["Ana", "João", "Maria", "José", "Antônio", "Francisca", "Carlos", "Luíza"]
LAST = ["Silva", "Santos", "Oliveira", "Souza", "Rodrigues", "Ferreira", "Conceição"]


def write_workbook(path: Path, rows: int) -> None:
    """A contact sheet as Excel saves one: strings in the shared-strings table."""
    rng = random.Random(11)

    def contacts() -> Iterator[list[object]]:
        yield HEADER
        for index in range(rows):
            last = rng.choice(LAST)
            yield [
                f"{rng.choice(FIRST)} {last}",
                rng.randrange(10**9, 10**11),
                rng.randrange(11 * 10**9, 99 * 10**9),
                f"{last.lower()}{index}@example.com",
                rng.choice(CITIES),
                dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(20_000)),
                rng.random() < 0.5,
                None if index % 3 else "cliente desde 2019",
            ]

    xlsx_support.write_workbook(path, contacts(), sheet="Contatos")
    xlsx_support.add_dimension(path, f"A1:H{rows + 1}")  # as Excel writes it


def _rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited from the parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def read_calamine(path: str) -> dict[str, object]:
    import python_calamine

    baseline = _rss_mib()
    started, cpu = time.perf_counter(), time.process_time()
    first = None
    count = 0
    with python_calamine.CalamineWorkbook.from_path(path) as workbook:
        sheet = workbook.get_sheet_by_index(0)
        for row in sheet.iter_rows():
            if first is None:
                first = time.perf_counter() - started
            count += len(row)
    return _figures(count, started, cpu, first, baseline)


def read_openpyxl(path: str) -> dict[str, object]:
    from openpyxl import load_workbook

    baseline = _rss_mib()
    started, cpu = time.perf_counter(), time.process_time()
    first = None
    count = 0
    workbook = load_workbook(path, read_only=True, data_only=True)
    try:
        sheet = workbook.worksheets[0]
        sheet.reset_dimensions()
        for row in sheet.iter_rows(values_only=True):
            if first is None:
                first = time.perf_counter() - started
            count += len(row)
    finally:
        workbook.close()
    return _figures(count, started, cpu, first, baseline)


def _figures(
    cells: int, started: float, cpu: float, first: float | None, baseline: float
) -> dict[str, object]:
    return {
        "cells": cells,
        "wall_s": round(time.perf_counter() - started, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "first_row_s": round(first or 0.0, 3),
        "peak_rss_mib": round(_rss_mib(), 1),
        "rss_growth_mib": round(_rss_mib() - baseline, 1),
    }


def cell_types(path: str) -> dict[str, list[str]]:
    """What each library returns for the first data row (types and values)."""
    import python_calamine
    from openpyxl import load_workbook

    with python_calamine.CalamineWorkbook.from_path(path) as workbook:
        rows = workbook.get_sheet_by_index(0).iter_rows()
        next(rows)
        calamine_row = next(rows)
    workbook_ = load_workbook(path, read_only=True, data_only=True)
    rows_ = workbook_.worksheets[0].iter_rows(min_row=2, max_row=2, values_only=True)
    openpyxl_row = next(rows_)
    workbook_.close()
    return {
        "calamine": [f"{type(v).__name__}:{v!r}" for v in calamine_row],
        "openpyxl": [f"{type(v).__name__}:{v!r}" for v in openpyxl_row],
    }


def sparse_workbook(path: Path) -> Path:
    """Two cells, at the first and the last address a sheet has."""
    xlsx_support.write_workbook(path, [["a"]], shared_strings=False)
    cells = '<row r="1"><c r="A1"><v>1</v></c></row>'
    cells += '<row r="1048576"><c r="XFD1048576"><v>2</v></c></row>'
    xlsx_support.replace_part(path, xlsx_support.SHEET_XML, xlsx_support.sheet_xml(cells))
    return path


def _sparse(library: str, path: Path) -> str:
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{limit}\nimport runpy, sys; sys.argv = {[__file__, '--child', library, str(path)]!r}; runpy.run_path(sys.argv[0], run_name='__main__')",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[0][:120]}"
    return done.stdout.strip()


def _child(library: str, path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", library, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, help="write the workbooks here (default: a temp dir)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        library, path = args.child
        reader = read_calamine if library == "calamine" else read_openpyxl
        print(json.dumps(reader(path)))
        return
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_xlsx"))
    folder.mkdir(parents=True, exist_ok=True)
    for rows in (args.rows // 4, args.rows):
        path = folder / f"contacts_{rows}.xlsx"
        started = time.perf_counter()
        write_workbook(path, rows)
        size = path.stat().st_size / 2**20
        print(f"{rows:,} rows: {size:.1f} MiB written in {time.perf_counter() - started:.1f} s")
        for library in ("calamine", "openpyxl"):
            print(f"  {library:<9} {_child(library, path)}")
    print(json.dumps(cell_types(str(folder / f"contacts_{args.rows}.xlsx")), indent=1))
    sparse = sparse_workbook(folder / "sparse.xlsx")
    for library in ("calamine", "openpyxl"):
        print(f"sparse {library:<9} {_sparse(library, sparse)}")


if __name__ == "__main__":
    main()

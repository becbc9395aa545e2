#!/usr/bin/env python3
"""The columns step (issue 29): how often its top suggestion is right, and how fast it reads a
file's head.

    .venv/bin/python benchmarks/bench_columns.py                  # accuracy on the corpus
    .venv/bin/python benchmarks/bench_columns.py --head FILE      # time the head read of FILE

Accuracy: each header of the labeled corpus (``tests/fixtures/column_headers.json``: real
Excel, HubSpot, RD Station and Mailchimp export headers, PT and EN, with the target a user
picks, and the client's existing custom fields) is suggested for on its own, first without
memory, then with a memory holding each header's right target (what the client's memory has
once an import mapped it). ``tests/unit/test_column_suggestions.py`` asserts the thresholds.

``--head``: the time ``importer.services.columns.read_head`` takes to read the header and the
first rows of a local file and suggest a target per column (the columns step's work; the API
adds its queries of the client's fields and memory).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

from importer.core.columns import (
    ClientColumns,
    ColumnTarget,
    CustomField,
    SampledColumn,
    Suggestion,
    suggest,
)
from importer.core.headers import TargetKind
from importer.core.layout import header_key

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "column_headers.json"


@dataclass(frozen=True, slots=True)
class Labeled:
    header: str
    target: str  # a TargetKind value, or custom_field:<name>
    origin: str
    samples: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Corpus:
    custom_fields: tuple[CustomField, ...]
    headers: tuple[Labeled, ...]


@dataclass(frozen=True, slots=True)
class Accuracy:
    right: int
    total: int
    misses: tuple[tuple[Labeled, str], ...]

    @property
    def share(self) -> float:
        return self.right / self.total


def load_corpus(path: Path = CORPUS) -> Corpus:
    document = json.loads(path.read_text("utf-8"))
    fields = tuple(CustomField(f["id"], f["name"]) for f in document["custom_fields"])
    headers = tuple(
        Labeled(h["header"], h["target"], h["origin"], tuple(h.get("samples", ())))
        for h in document["headers"]
    )
    return Corpus(fields, headers)


def label_of(target: ColumnTarget) -> str:
    if target.kind is TargetKind.CUSTOM_FIELD:
        return f"custom_field:{target.field_name}"
    return target.kind.value


def remembered_word(labeled: Labeled) -> str:
    """The memory's word for a labeled header: what mapping it once stored."""
    kind, _, name = labeled.target.partition(":")
    if kind == TargetKind.CUSTOM_FIELD.value:
        return f"custom:{name}"
    if kind == TargetKind.NEW_CUSTOM_FIELD.value:
        return f"custom:{labeled.header.strip()}"
    return kind


def suggestion_for(labeled: Labeled, known: ClientColumns) -> Suggestion:
    return suggest(SampledColumn(0, labeled.header, labeled.samples), known)


def accuracy(corpus: Corpus, *, memory: bool) -> Accuracy:
    """Top-1 accuracy; with ``memory``, each header is remembered with its right target."""
    right, misses = 0, []
    for labeled in corpus.headers:
        remembered = {header_key(labeled.header): remembered_word(labeled)} if memory else {}
        known = ClientColumns(corpus.custom_fields, remembered)
        got = label_of(suggestion_for(labeled, known).target)
        if got == labeled.target:
            right += 1
        else:
            misses.append((labeled, got))
    return Accuracy(right, len(corpus.headers), tuple(misses))


async def time_head(path: Path, rows: int) -> tuple[float, int]:
    """Seconds to read the head of ``path`` and suggest for its columns; the column count."""
    from importer.adapters.storage.local import LocalObjectStore
    from importer.core.columns import suggest_all
    from importer.services.columns import read_head, transient_job
    from importer.services.runs import ObjectSource, format_for, pipeline_config
    from importer.settings import Settings

    job = transient_job(path.name, format_for(path.name), None)
    source = ObjectSource(LocalObjectStore(path.parent), path.name, size=None, pinned=None)
    started = time.perf_counter()
    head = await read_head(source, job, pipeline_config(Settings(), None, False), rows)
    views = suggest_all(head.columns(), ClientColumns())
    return time.perf_counter() - started, len(views)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", type=Path, help="time the columns step's head read of a file")
    parser.add_argument("--rows", type=int, default=50)
    args = parser.parse_args()
    if args.head is not None:
        seconds, columns = asyncio.run(time_head(args.head, args.rows))
        size = args.head.stat().st_size
        print(f"{args.head} ({size / 1e9:.2f} GB): {columns} columns in {seconds * 1000:.1f} ms")
        return
    corpus = load_corpus()
    print(f"corpus: {len(corpus.headers)} labeled headers, {len(corpus.custom_fields)} fields")
    for memory in (False, True):
        result = accuracy(corpus, memory=memory)
        said = "with memory" if memory else "without memory"
        print(f"top-1 accuracy {said}: {result.right}/{result.total} = {result.share:.1%}")
        for labeled, got in result.misses:
            print(f"  miss: {labeled.header!r} ({labeled.origin}) is {labeled.target}, got {got}")


if __name__ == "__main__":
    main()

"""Runs one atheris fuzz target the same way for every target (``scripts/fuzz`` calls it).

``python fuzz/_driver.py fuzz/fuzz_x.py [libFuzzer flags and corpus dirs]``

- Imports the target (a module with ``TestOneInput(data: bytes)``) inside
  ``atheris.instrument_imports``, so the pure ``importer`` code it reaches is coverage
  instrumented too; the compiled extensions carry their own (clang ``fuzzer-no-link``).
- Wraps ``TestOneInput`` with a Python reference-leak probe that LeakSanitizer cannot make:
  a leaked object the garbage collector tracks stays reachable from the collector's lists, so
  LSan never reports it. Every ``FUZZ_PROBE_EVERY`` inputs (default 2000) the current input is
  run ``FUZZ_PROBE_REPEATS`` more times (default 50); when the collector then tracks at least
  one more object per repeat, the input leaks and the probe raises (a crash for libFuzzer, with
  the input saved). Repeating one input keeps caches (regex, codecs, phonenumbers metadata)
  out of the count: they fill on the warm-up call, not on every call.
- C-level leaks (malloc without free, a leaked non-tracked object such as bytes) are
  LeakSanitizer's, from ``scripts/fuzz``'s ASAN_OPTIONS/LSAN_OPTIONS.

The target's own ``if __name__ == "__main__"`` block is not used here, so a target also runs
alone (``python fuzz/fuzz_x.py``) without this probe.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

import atheris

PROBE_EVERY = int(os.environ.get("FUZZ_PROBE_EVERY", "2000"))
PROBE_REPEATS = int(os.environ.get("FUZZ_PROBE_REPEATS", "50"))


class ReferenceLeakError(AssertionError):
    """Running one input again keeps more objects alive each time."""


def load_target(path: Path) -> Callable[[bytes], None]:
    """The target's TestOneInput, with the importer package instrumented for coverage."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"fuzz/_driver.py: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    with atheris.instrument_imports(include=["importer", path.stem]):
        spec.loader.exec_module(module)
    test: Callable[[bytes], None] = module.TestOneInput
    importer = sys.modules.get("importer")
    where = getattr(importer, "__file__", None) if importer else None
    compiled = sorted(
        name
        for name, loaded in list(sys.modules.items())
        if name.startswith("importer.") and str(getattr(loaded, "__file__", "")).endswith(".so")
    )
    print(f"INFO: {path.name} imports importer from {where}", file=sys.stderr)
    print(f"INFO: compiled modules loaded: {', '.join(compiled) or 'none'}", file=sys.stderr)
    return test


def _tracked_after(test: Callable[[bytes], None], data: bytes, times: int) -> int:
    for _ in range(times):
        _quiet(test, data)
    gc.collect()
    return len(gc.get_objects())


def _quiet(test: Callable[[bytes], None], data: bytes) -> None:
    # An exception here is not the probe's business: the first, unprobed call already raised
    # it (and libFuzzer reported it) if the target lets it out.
    with contextlib.suppress(Exception):
        test(data)


def with_leak_probe(test: Callable[[bytes], None]) -> Callable[[bytes], None]:
    calls = 0

    def probed(data: bytes) -> None:
        nonlocal calls
        try:
            test(data)
        finally:
            # The input's cyclic garbage (an exception caught inside the target keeps its
            # traceback's frames in a cycle) is freed now: libFuzzer's leak check after the
            # input cannot tell a cycle the collector will free from a leak.
            gc.collect()
        calls += 1
        if PROBE_EVERY <= 0 or calls % PROBE_EVERY:
            return
        before = _tracked_after(test, data, 2)  # warm-up: caches fill here
        after = _tracked_after(test, data, PROBE_REPEATS)
        if after - before >= PROBE_REPEATS:
            raise ReferenceLeakError(
                f"{after - before} more tracked objects after {PROBE_REPEATS} runs of one "
                f"input ({len(data)} bytes): a reference leak"
            )

    return probed


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python fuzz/_driver.py fuzz/fuzz_x.py [libFuzzer args]")
    target = Path(sys.argv[1]).resolve()
    test = with_leak_probe(load_target(target))
    atheris.Setup([str(target), *sys.argv[2:]], test)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

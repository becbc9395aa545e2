"""The compiled hot path: every ``importer/**/_*.pyx`` is a Cython extension beside the pure
module it accelerates (the pure module stays the oracle). ``pip install .`` builds them; a
C compiler is needed (gcc on Debian, ``build-essential`` in the Dockerfile's build stage).

``IMPORTER_SANITIZE=address,fuzzer-no-link`` with ``CC=clang`` builds them with AddressSanitizer
and libFuzzer's coverage instrumentation for the atheris fuzz targets (``scripts/fuzz``, which
runs them with atheris's ``asan_with_fuzzer.so`` preloaded); never for a normal install. Clang,
not gcc: gcc has no ``fuzzer-no-link``, and its libasan is not the runtime atheris preloads.
"""

from __future__ import annotations

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).parent
SANITIZE = os.environ.get("IMPORTER_SANITIZE", "")
COMPILE_ARGS = (
    ["-O2"] if not SANITIZE else ["-O1", "-g", "-fno-omit-frame-pointer", f"-fsanitize={SANITIZE}"]
)
LINK_ARGS = [] if not SANITIZE else [f"-fsanitize={SANITIZE}"]


def extensions() -> list[Extension]:
    found = []
    for source in sorted(ROOT.glob("importer/**/_*.pyx")):
        relative = source.relative_to(ROOT)
        name = ".".join(relative.with_suffix("").parts)
        found.append(
            Extension(
                name,
                [str(relative)],
                extra_compile_args=COMPILE_ARGS,
                extra_link_args=LINK_ARGS,
            )
        )
    return found


setup(
    ext_modules=cythonize(
        extensions(),
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
            "embedsignature": True,
        },
        annotate=False,
    ),
)

#!/usr/bin/env python3
"""Micro-benchmark of ``importer.core.normalize``: µs per call, fast path vs library path.

    .venv/bin/python benchmarks/bench_normalize.py [--values 100000] [--seed 7]

Values are generated like the benchmark files' (``benchmarks/generate.py``): BR phones in
the four usual shapes with ~1% invalid, e-mails ``name.surname<n>@provider`` with ~1%
malformed, keys formatted or bare. The "library" rows call the fallback directly on the
same values, i.e. what every call would cost without the fast paths.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from importer.core import normalize

DDDS = ["11", "21", "31", "41", "51", "61", "71", "81", "85", "19", "27", "47", "62", "91"]
PROVIDERS = ["gmail.com", "hotmail.com", "yahoo.com.br", "outlook.com", "uol.com.br"]
PROVIDERS += ["bol.com.br", "Empresa.COM.BR", "terra.com.br"]
NAMES = ["maria", "joao", "ana", "jose", "francisca", "antonio", "adriana", "carlos", "Paulo"]
SURNAMES = ["silva", "santos", "oliveira", "souza", "lima", "pereira", "ferreira", "Costa"]


def phone(rng: random.Random) -> str:
    ddd, n = rng.choice(DDDS), rng.randrange(10**8)
    roll = rng.random()
    if roll < 0.01:
        return rng.choice(
            ["(20) 91234-5678", f"({ddd}) 9{n // 10000:04d}-{n % 1000:03d}", "não tem"]
        )
    if roll < 0.1:
        return f"({ddd}) {rng.choice('2345')}{n // 10000 % 1000:03d}-{n % 10000:04d}"
    local = f"9{n // 10000:04d}-{n % 10000:04d}"
    return rng.choice(
        [f"({ddd}) {local}", f"{ddd}9{n:08d}", f"+55 {ddd} {local}", f"{ddd} {local}"]
    )


def email(rng: random.Random) -> str:
    suffix = rng.choice(["", "", "", str(rng.randint(1, 99)), str(rng.randint(1960, 2008))])
    local = f"{rng.choice(NAMES)}.{rng.choice(SURNAMES)}{suffix}"
    if rng.random() < 0.01:
        return f"{local}{rng.choice(['', '.', ' '])}{rng.choice(PROVIDERS)}"
    return f"{local}@{rng.choice(PROVIDERS)}"


def key(rng: random.Random) -> str:
    base = f"{rng.randrange(10**9):09d}"
    digits = base + _cpf_dv(base)
    style = rng.random()
    if style < 0.6:
        return f"{digits[:3]}.{digits[3:6]}.{digits[6:9]}-{digits[9:]}"
    return digits.lstrip("0") if style < 0.65 else digits


def _cpf_dv(base: str) -> str:
    values = [int(c) for c in base]
    for _ in range(2):
        total = sum(v * (len(values) + 1 - i) for i, v in enumerate(values))
        values.append(total * 10 % 11 % 10)
    return f"{values[-2]}{values[-1]}"


def per_call_us(fn: Callable[[str], object], values: Sequence[str], repeats: int = 3) -> float:
    """Best of ``repeats`` passes over ``values``, in µs per call."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for value in values:
            fn(value)
        best = min(best, time.perf_counter_ns() - start)
    return best / len(values) / 1000


def fast_share(values: Sequence[str]) -> float:
    fast = sum(normalize._fast_national_number(v, international=False) is not None for v in values)
    return fast / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--values", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    phones = [phone(rng) for _ in range(args.values)]
    emails = [email(rng) for _ in range(args.values)]
    keys = [key(rng) for _ in range(args.values)]
    email_fast = sum(normalize._EMAIL_FAST.fullmatch(e) is not None for e in emails)

    def library_phone(raw: str) -> object:
        return normalize._library_phone(raw, international=False)

    rows = [
        ("normalize_phone", per_call_us(normalize.normalize_phone, phones), fast_share(phones)),
        ("  library path (parse + is_valid_number)", per_call_us(library_phone, phones), None),
        (
            "normalize_email",
            per_call_us(normalize.normalize_email, emails),
            email_fast / len(emails),
        ),
        ("  library path (validate_email)", per_call_us(normalize._library_email, emails), None),
        ("normalize_cpf_cnpj", per_call_us(normalize.normalize_cpf_cnpj, keys), None),
    ]
    try:
        from importer.core import _rows as compiled
    except ImportError:
        print("importer.core._rows: not built (python setup.py build_ext --inplace)")
    else:

        def compiled_phone(raw: str) -> object:
            return compiled.normalize_phone(raw)

        rows += [
            ("compiled normalize_phone", per_call_us(compiled_phone, phones), None),
            ("compiled normalize_email", per_call_us(compiled.normalize_email, emails), None),
            ("compiled normalize_cpf_cnpj", per_call_us(compiled.normalize_cpf_cnpj, keys), None),
        ]
    print(f"{args.values} values per function, best of 3 passes")
    for name, us, share in rows:
        fast = f"  ({share:.1%} on the fast path)" if share is not None else ""
        print(f"{name:<42} {us:7.2f} µs/call{fast}")


if __name__ == "__main__":
    main()

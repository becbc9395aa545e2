#!/usr/bin/env python3
"""Deterministic generator of realistic Brazilian contact files for the benchmarks.

Standard library only; importable (``generate(...)``) and runnable as a script::

    python benchmarks/generate.py --rows 1000000 --seed 42 --out data/contacts.csv \\
        [--preexisting-out data/pre.csv --preexisting-ratio 0.30] \\
        [--format csv|jsonl] [--gzip [--gzip-level 1]]

Header (CSV; JSONL objects carry the same keys, every value a string)::

    nome,cpf,email,celular,whatsapp,endereco,plano,cidade,segmento

* ``cpf``: ~70% CPF, ~27% numeric CNPJ, ~3% alphanumeric CNPJ; formatted
  (``123.456.789-09``, ``12.345.678/0001-95``) or bare, some with the leading zeros a
  spreadsheet drops (only keys starting with ``0``, and a CNPJ only while 12+ characters
  are left, so that it still normalizes to a CNPJ), a few with surrounding spaces, a few
  alphanumeric CNPJs in lowercase.  The key of index ``k`` is a pure function of
  ``(seed, k)`` (``KeySpace``), so no set of keys is ever stored.
* ~2% of rows carry a key whose first check digit is wrong: the invalid rows.
* ~10% of rows repeat an earlier valid key, half among the last ~100 new keys ("near"),
  half anywhere earlier ("far"), with another name, e-mail, phone, address and custom
  values; a quarter of them leave some of those fields empty.
* Every other row introduces a new key.  Nothing else makes a row invalid: malformed
  e-mails (~1%) and phones (~1% of ``celular``, ~0.5% of ``whatsapp``) only warn.

So an exact importer reports, for the main file into an empty client::

    invalid = bad_check_digits, inserted = distinct_keys,
    updated (MERGE) or ignored (DISCARD) = repeated_rows

and, once the preexisting file (``preexisting_keys`` rows, all valid) is in::

    inserted = distinct_keys - preexisting_keys,
    updated (MERGE) or ignored (DISCARD) = repeated_rows + preexisting_keys

These are written to ``<out>.meta.json`` under ``"expected"``.

The same arguments give byte-identical files: ``random.Random`` instances seeded from
``seed`` only, no global state, no clock (the gzip header carries no name, mtime 0).
The main file does not depend on whether a preexisting file is asked for.
"""

from __future__ import annotations

import argparse
import gzip as gzip_module
import itertools
import json
import math
import os
import random
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "HEADER",
    "GenerationStats",
    "KeySpace",
    "cnpj_check_digits",
    "cpf_check_digits",
    "generate",
    "main",
    "meta_path_for",
]

GENERATOR_VERSION: Final = 1
HEADER: Final[tuple[str, ...]] = (
    "nome",
    "cpf",
    "email",
    "celular",
    "whatsapp",
    "endereco",
    "plano",
    "cidade",
    "segmento",
)
FORMATS: Final = ("csv", "jsonl")
MAX_ROWS: Final = 100_000_000  # keeps every key index inside the scramble domains
WRITE_BUFFER: Final = 1 << 20
BATCH_ROWS: Final = 4096
NEAR_WINDOW: Final = 100

# Row mix, out of 65536: bad check digits, then repeats; the rest are new keys.
_BAD_T: Final = round(0.02 * 65536)
_REPEAT_T: Final = _BAD_T + round(0.10 * 65536)
# Key kinds, out of 1024 (bits 0-9 of the key's mix): CPF, numeric CNPJ, alphanumeric.
_CPF_T: Final = 717  # 70.0%
_CNPJ_T: Final = 993  # 27.0%, leaving 3.0% alphanumeric

_M64: Final = (1 << 64) - 1
_GOLDEN64: Final = 0x9E3779B97F4A7C15

# --------------------------------------------------------------------------------------
# Check digits (numeric and alphanumeric CNPJ share the rule: value = ord(c) - 48)
# --------------------------------------------------------------------------------------
_CPF_W1: Final = (10, 9, 8, 7, 6, 5, 4, 3, 2)
_CPF_W2: Final = (11, 10, 9, 8, 7, 6, 5, 4, 3, 2)
_CNPJ_W1: Final = (5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2)
_CNPJ_W2: Final = (6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2)


def _dv(total: int) -> int:
    rem = total % 11
    return 0 if rem < 2 else 11 - rem


def _weighted(chars: str, weights: Sequence[int]) -> int:
    return sum((ord(c) - 48) * w for c, w in zip(chars, weights, strict=True)) % 11


def cpf_check_digits(base9: str) -> str:
    """The two check digits of a 9-digit CPF base."""
    d1 = _dv(_weighted(base9, _CPF_W1))
    return f"{d1}{_dv(_weighted(base9 + str(d1), _CPF_W2))}"


def cnpj_check_digits(base12: str) -> str:
    """The two check digits of a 12-character CNPJ base ([0-9A-Z])."""
    d1 = _dv(_weighted(base12, _CNPJ_W1))
    return f"{d1}{_dv(_weighted(base12 + str(d1), _CNPJ_W2))}"


def _partial_table(weights: Sequence[int]) -> list[int]:
    """t[v] = (sum of digit_j(v) * weights[j]) % 11 for every v of len(weights) digits."""
    table = [0]
    for w in reversed(weights):
        table = [(d * w + x) % 11 for d in range(10) for x in table]
    return table


_DV_TABLE: Final = tuple(_dv(s) for s in range(80))
_B36: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ALNUM_DOMAIN: Final = 26 * 36**7  # first root character a letter: never all digits
_CPF_HI: Final = 9990  # 4-digit values that are not one digit repeated
# 16 branches picked by bits 60-63 of the key's mix; "0001" dominates as in real life.
_BRANCHES: Final = ("0001",) * 10 + ("0002", "0003", "0004", "0005", "0010", "0101")


# --------------------------------------------------------------------------------------
# Key space: index k -> key, a bijection per kind, nothing stored
# --------------------------------------------------------------------------------------
def _coprime_multiplier(rng: random.Random, modulus: int) -> int:
    while True:
        a = rng.randrange(modulus // 3, modulus)
        if math.gcd(a, modulus) == 1:
            return a


class KeySpace:
    """Deterministic key of index ``k`` for a seed (``0 <= k < MAX_ROWS``), nothing stored.

    * ``mix(k)``: 64 random-looking bits (tabulation hashing: two look-ups and a xor)
      that pick the key's kind (bits 0-9), its CNPJ branch (bits 60-63) and the values of
      its first occurrence.
    * The key: a bijective scramble of ``k`` over its kind's domain, so two indexes of
      the same kind never share a key.  CPF base and numeric CNPJ root: a Feistel
      permutation with table round functions over (hi, lo) = (first 4 digits, the other
      5 or 4); a CPF ``hi`` ranges over the 9990 4-digit values that are not one digit
      repeated, so no CPF is a repeated-digit sequence.  Alphanumeric CNPJ root: an
      affine / swap / affine permutation over 26 * 36**7 (a letter, then 7 of [0-9A-Z]),
      read as 4 pairs of characters.  Kinds cannot collide: 11 digits, 14 digits,
      14 characters with a letter.
    """

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"importer-benchmark-keys/{seed}")
        bits = rng.getrandbits
        self.mix_lo = [bits(64) for _ in range(1 << 16)]
        self.mix_hi = [bits(64) for _ in range((MAX_ROWS >> 16) + 1)]
        self.pre_offset = bits(64)
        self.cpf_hi_values = [v for v in range(10_000) if v % 1111]  # index -> 4 digits
        self.cpf_f1 = [bits(32) % _CPF_HI for _ in range(100_000)]
        self.cpf_f2 = [bits(32) % 100_000 for _ in range(_CPF_HI)]
        self.cnpj_f1 = [bits(32) % 10_000 for _ in range(10_000)]
        self.cnpj_f2 = [bits(32) % 10_000 for _ in range(10_000)]
        self._alnum = (
            _coprime_multiplier(rng, _ALNUM_DOMAIN),
            rng.randrange(_ALNUM_DOMAIN),
            _coprime_multiplier(rng, _ALNUM_DOMAIN),
            rng.randrange(_ALNUM_DOMAIN),
        )
        # Check-digit partial sums (mod 11), indexed by the half's value.
        self.cpf_h1 = _partial_table(_CPF_W1[:4])
        self.cpf_l1 = _partial_table(_CPF_W1[4:])
        self.cpf_h2 = _partial_table(_CPF_W2[:4])
        self.cpf_l2 = _partial_table(_CPF_W2[4:9])
        self.cnpj_h1 = _partial_table(_CNPJ_W1[:4])
        self.cnpj_l1 = _partial_table(_CNPJ_W1[4:8])
        self.cnpj_h2 = _partial_table(_CNPJ_W2[:4])
        self.cnpj_l2 = _partial_table(_CNPJ_W2[4:8])
        self.branch_1 = [_weighted(b, _CNPJ_W1[8:12]) for b in _BRANCHES]
        self.branch_2 = [_weighted(b, _CNPJ_W2[8:12]) for b in _BRANCHES]
        # Alphanumeric root: pair p of characters (2p, 2p + 1) -> string, partial sums.
        self.pair_str = [a + b for a in _B36 for b in _B36]
        self.pair_1 = [
            [_weighted(s, _CNPJ_W1[2 * p : 2 * p + 2]) for s in self.pair_str] for p in range(4)
        ]
        self.pair_2 = [
            [_weighted(s, _CNPJ_W2[2 * p : 2 * p + 2]) for s in self.pair_str] for p in range(4)
        ]

    # -- attributes ----------------------------------------------------------------
    def mix(self, k: int) -> int:
        """64 random-looking bits of ``k``."""
        return self.mix_lo[k & 0xFFFF] ^ self.mix_hi[k >> 16]

    def kind(self, k: int) -> str:
        roll = self.mix(k) & 1023
        return "cpf" if roll < _CPF_T else "cnpj" if roll < _CNPJ_T else "cnpj_alnum"

    def count_kinds(self, n: int) -> tuple[int, int, int]:
        """(CPF, numeric CNPJ, alphanumeric CNPJ) among keys ``0 .. n-1``, in O(n / 64).

        The kind roll of ``k`` is ``(mix_lo[k & 0xFFFF] ^ mix_hi[k >> 16]) & 1023``: a
        whole block of 65536 indexes is counted from a histogram of ``mix_lo``.
        """
        hist = [0] * 1024
        for v in self.mix_lo:
            hist[v & 1023] += 1
        cpf = cnpj = 0
        blocks = n >> 16
        for b in range(blocks):
            hb = self.mix_hi[b] & 1023
            for v, count in enumerate(hist):
                roll = v ^ hb
                if roll < _CPF_T:
                    cpf += count
                elif roll < _CNPJ_T:
                    cnpj += count
        for k in range(blocks << 16, n):
            roll = self.mix(k) & 1023
            if roll < _CPF_T:
                cpf += 1
            elif roll < _CNPJ_T:
                cnpj += 1
        return cpf, cnpj, n - cpf - cnpj

    def preexisting_weyl(self, k: int) -> int:
        """Weyl-sequence value of ``k``; below ``ratio * 2**64``: the key is preexisting.

        A low-discrepancy choice: ~ratio of the keys, evenly spread over the file.
        """
        return (k * _GOLDEN64 + self.pre_offset) & _M64

    # -- permutations --------------------------------------------------------------
    def cpf_halves(self, k: int) -> tuple[int, int]:
        """CPF base of key ``k``: (index into ``cpf_hi_values``, last 5 digits)."""
        hi, lo = divmod(k, 100_000)
        hi = (hi + self.cpf_f1[lo]) % _CPF_HI
        return hi, (lo + self.cpf_f2[hi]) % 100_000

    def cnpj_halves(self, k: int) -> tuple[int, int]:
        """Numeric CNPJ root of key ``k``: (first 4 digits, next 4 digits)."""
        hi, lo = divmod(k, 10_000)
        hi = (hi + self.cnpj_f1[lo]) % 10_000
        return hi, (lo + self.cnpj_f2[hi]) % 10_000

    def alnum_parts(self, k: int, branch: int) -> tuple[str, str]:
        """(12-character base, check digits) of the alphanumeric CNPJ of key ``k``."""
        a1, b1, a2, b2 = self._alnum
        x = (a1 * k + b1) % _ALNUM_DOMAIN
        x = (x % 36**4) * (26 * 36**3) + x // 36**4
        x = (a2 * x + b2) % _ALNUM_DOMAIN
        x, p3 = divmod(x, 1296)
        x, p2 = divmod(x, 1296)
        p0, p1 = divmod(x, 1296)
        p0 += 360  # first character a letter: pairs "A0" .. "ZZ"
        one, two = self.pair_1, self.pair_2
        d1 = _DV_TABLE[one[0][p0] + one[1][p1] + one[2][p2] + one[3][p3] + self.branch_1[branch]]
        d2 = _DV_TABLE[
            two[0][p0] + two[1][p1] + two[2][p2] + two[3][p3] + self.branch_2[branch] + 2 * d1
        ]
        ps = self.pair_str
        return ps[p0] + ps[p1] + ps[p2] + ps[p3] + _BRANCHES[branch], f"{d1}{d2}"

    # -- keys ----------------------------------------------------------------------
    def parts(self, k: int) -> tuple[str, str, str]:
        """(kind, base without check digits, check digits) of key ``k``."""
        h = self.mix(k)
        roll = h & 1023
        if roll < _CPF_T:
            hi, lo = self.cpf_halves(k)
            hv = self.cpf_hi_values[hi]
            d1 = _DV_TABLE[self.cpf_h1[hv] + self.cpf_l1[lo]]
            d2 = _DV_TABLE[self.cpf_h2[hv] + self.cpf_l2[lo] + 2 * d1]
            return "cpf", f"{hv:04d}{lo:05d}", f"{d1}{d2}"
        bi = h >> 60
        if roll < _CNPJ_T:
            hi, lo = self.cnpj_halves(k)
            d1 = _DV_TABLE[self.cnpj_h1[hi] + self.cnpj_l1[lo] + self.branch_1[bi]]
            d2 = _DV_TABLE[self.cnpj_h2[hi] + self.cnpj_l2[lo] + self.branch_2[bi] + 2 * d1]
            return "cnpj", f"{hi:04d}{lo:04d}{_BRANCHES[bi]}", f"{d1}{d2}"
        return ("cnpj_alnum", *self.alnum_parts(k, bi))

    def key(self, k: int) -> str:
        """The normalized (valid) key of index ``k``."""
        _, base, dv = self.parts(k)
        return base + dv


def _render_key(base: str, dv: str, style: int) -> str:
    """Write a key as people do; ``style`` is 5 random bits (0-13 formatted, 14-27 bare)."""
    if style < 14:
        if len(base) == 9:
            return f"{base[:3]}.{base[3:6]}.{base[6:]}-{dv}"
        return f"{base[:2]}.{base[2:5]}.{base[5:8]}/{base[8:]}-{dv}"
    if style < 28:
        return base + dv
    if style < 30:  # a spreadsheet dropped the leading zeros
        bare = base + dv
        stripped = bare.lstrip("0")
        # 11 characters or fewer would normalize as a CPF: keep such a CNPJ whole
        return stripped if len(base) == 9 or len(stripped) >= 12 else bare
    if style == 30:
        return f" {base}{dv} "  # surrounding spaces (the importer trims)
    if not base.isdigit():
        return (base + dv).lower()  # normalization uppercases
    return _render_key(base, dv, 0)


def _bad_key(ks: KeySpace, k: int, style: int, r: int) -> bytes:
    """Key ``k`` written with a wrong first check digit."""
    _, base, dv = ks.parts(k)
    return _render_key(base, f"{(int(dv[0]) + 1 + r % 9) % 10}{dv[1]}", style).encode()


# --------------------------------------------------------------------------------------
# Realistic values
# --------------------------------------------------------------------------------------
FIRST_NAMES: Final = (
    "João", "José", "Antônio", "Francisco", "Carlos", "Paulo", "Pedro", "Lucas", "Luiz",
    "Marcos", "Luís", "Gabriel", "Rafael", "Daniel", "Marcelo", "Bruno", "Eduardo", "Felipe",
    "Raimundo", "Rodrigo", "Sebastião", "Fábio", "Márcio", "Vinícius", "Otávio", "Caio",
    "Matheus", "Thiago", "Júlio", "Cícero", "Benedito", "Geraldo", "Mário", "Sérgio",
    "Maria", "Ana", "Francisca", "Antônia", "Adriana", "Juliana", "Márcia", "Fernanda",
    "Patrícia", "Aline", "Sandra", "Camila", "Letícia", "Ângela", "Conceição", "Lúcia",
    "Cecília", "Bárbara", "Débora", "Helena", "Inês", "Irene", "Luíza", "Mônica", "Natália",
    "Cláudia", "Vitória", "Beatriz", "Fátima", "Glória", "Simone", "Tânia", "Valéria",
    "Maria José", "Ana Cláudia", "Maria Luísa", "João Pedro", "Luiz Antônio", "Raíssa",
)  # fmt: skip
LAST_NAMES: Final = (
    "Silva", "Santos", "Oliveira", "Souza", "Rodrigues", "Ferreira", "Alves", "Pereira",
    "Lima", "Gomes", "Costa", "Ribeiro", "Martins", "Carvalho", "Almeida", "Lopes", "Soares",
    "Fernandes", "Vieira", "Barbosa", "Rocha", "Dias", "Nascimento", "Andrade", "Moreira",
    "Nunes", "Marques", "Machado", "Mendes", "Freitas", "Cardoso", "Ramos", "Gonçalves",
    "Araújo", "Conceição", "Simões", "Guimarães", "Magalhães", "Brandão", "Falcão", "Assunção",
    "Estêvão", "Fagundes", "Pimentel", "Sampaio", "Leão", "Romão", "Prudêncio", "Antunes",
    "Brás", "Gusmão", "Patrício", "Lúcio", "Inácio", "Damião", "D'Ávila", "Sá", "Paixão",
    "Peçanha", "Monteiro", "Teixeira", "Cavalcanti", "Albuquerque", "Bezerra", "Aragão",
)  # fmt: skip
COMPOUND_SURNAMES: Final = (
    "da Silva", "dos Santos", "de Souza", "de Oliveira", "da Conceição", "de Jesus",
    "do Nascimento", "das Neves", "da Costa", "de Araújo", "dos Reis", "de Assunção",
)  # fmt: skip
NICKNAMES: Final = ("Zé", "Toninho", "Tião", "Chico", "Preta", "Nena", "Juca", "Dudu")
EMAIL_DOMAINS: Final = ("gmail.com", "hotmail.com", "uol.com.br", "empresa.com.br")
_EMAIL_DOMAIN_WEIGHTS: Final = (3, 2, 1, 2)
STREET_TYPES: Final = (
    "Rua", "Rua", "Rua", "Avenida", "Av.", "Travessa", "Alameda", "Praça", "Estrada",
    "Rodovia",
)  # fmt: skip
STREET_NAMES: Final = (
    "das Flores", "São João", "Dom Pedro II", "Getúlio Vargas", "Tiradentes",
    "Marechal Deodoro", "XV de Novembro", "Sete de Setembro", "Barão do Rio Branco",
    "Santos Dumont", "Presidente Juscelino Kubitschek", "da Consolação", "Paulista",
    "Brigadeiro Faria Lima", "Ipiranga", "Conselheiro Furtado", "Joaquim Nabuco",
    "Coronel Antônio Prado", "Doutor Arnaldo", "José Bonifácio", "Padre Anchieta",
    "Visconde de Mauá", "Rui Barbosa", "Álvares Cabral", "Maria Antônia", "dos Açaís",
    "Conceição", "Bento Gonçalves", "Hercílio Luz", "Cândido de Abreu", "Jerônimo Monteiro",
    "Epitácio Pessoa", "Fernão Dias", "Anhangüera", "Princesa Isabel", "Caetés",
)  # fmt: skip
COMPLEMENTS: Final = (
    "", "", "", "Apto 12", "Apto 304", "Bloco B, Apto 1102", "Casa 2", "Sala 1201",
    "Fundos", "Loja 3", "Conj. 45",
)  # fmt: skip
NEIGHBORHOODS: Final = (
    "Centro", "Jardim América", "Vila Mariana", "Copacabana", "Boa Viagem", "Savassi",
    "Moinhos de Vento", "Batel", "Pituba", "Aldeota", "Setor Bueno", "Asa Sul", "Tijuca",
    "Santana", "Mooca", "Ipanema", "Jardim Paulistano", "Vila Isabel", "Petrópolis",
    "São Cristóvão", "Jaçanã", "Ipiranga", "Lapa", "Barra da Tijuca", "Icaraí",
)  # fmt: skip
PLANS: Final = (
    "Básico", "Pro", "Premium", "Empresarial", "Família", "Pré-pago", "Controle", "Grátis",
)  # fmt: skip
CITIES: Final = (
    "São Paulo", "Rio de Janeiro", "Belo Horizonte", "Brasília", "Salvador", "Fortaleza",
    "Recife", "Porto Alegre", "Curitiba", "Goiânia", "Belém", "Manaus", "São Luís", "Maceió",
    "João Pessoa", "Natal", "Teresina", "Florianópolis", "Vitória", "Cuiabá", "Campo Grande",
    "Aracaju", "Macapá", "Palmas", "Porto Velho", "Rio Branco", "Boa Vista", "Niterói",
    "Campinas", "Santos", "São José dos Campos", "Ribeirão Preto", "Uberlândia",
    "Juiz de Fora", "Londrina", "Maringá", "Joinville", "Blumenau", "Caxias do Sul",
    "Pelotas", "Feira de Santana", "Vitória da Conquista", "Petrópolis", "Mossoró",
    "Jaboatão dos Guararapes", "Olinda", "Caruaru", "Anápolis", "Foz do Iguaçu",
    "São Gonçalo", "Duque de Caxias", "Nova Iguaçu", "Guarulhos", "Osasco", "Santo André",
    "São Bernardo do Campo", "Sorocaba", "Jundiaí", "Piracicaba", "Bauru", "Marília",
    "Araçatuba", "Itajaí", "Chapecó",
)  # fmt: skip
SEGMENTS: Final = (
    "Varejo", "Saúde", "Educação", "Serviços", "Indústria", "Agronegócio", "Tecnologia",
    "Alimentação", "Logística", "Construção", "Finanças", "Comunicação", "Turismo",
    "Imobiliário", "Energia", "Automotivo",
)  # fmt: skip
# Mobile area codes (all valid) with rough population weights.
DDDS: Final = (
    (11, 30), (12, 2), (13, 2), (14, 2), (15, 2), (16, 2), (17, 2), (18, 1), (19, 4),
    (21, 12), (22, 1), (24, 1), (27, 2), (28, 1), (31, 6), (32, 1), (33, 1), (34, 1),
    (35, 1), (37, 1), (38, 1), (41, 3), (42, 1), (43, 1), (44, 1), (45, 1), (46, 1),
    (47, 2), (48, 1), (49, 1), (51, 4), (53, 1), (54, 1), (55, 1), (61, 4), (62, 2),
    (63, 1), (64, 1), (65, 1), (66, 1), (67, 1), (68, 1), (69, 1), (71, 3), (73, 1),
    (74, 1), (75, 1), (77, 1), (79, 1), (81, 3), (82, 1), (83, 1), (84, 1), (85, 3),
    (86, 1), (87, 1), (88, 1), (89, 1), (91, 2), (92, 2), (93, 1), (94, 1), (95, 1),
    (96, 1), (97, 1), (98, 1), (99, 1),
)  # fmt: skip
VALID_DDDS: Final = frozenset(d for d, _ in DDDS)
INVALID_DDDS: Final = (
    10, 20, 23, 25, 26, 29, 30, 36, 39, 40, 50, 52, 56, 57, 58, 59, 60, 70, 72, 76, 78, 80, 90,
)  # fmt: skip
# Phone styles, 2 bits: "(11) 91234-5678", "11912345678", "+55 11 91234-5678", "11 91234-5678"
_PHONE_PREFIXES: Final = ("({}) ", "{}", "+55 {} ", "{} ")

_NAME_POOL: Final = 1 << 14  # bits 10-23 of the key's mix
_LINE_POOL: Final = 1 << 16  # bits 24-39
_TAIL_POOL: Final = 1 << 16  # bits 44-59: address + custom values
_ADDRESS_POOL: Final = 1 << 13
_SPARSE_TAIL_POOL: Final = 1 << 12
_INVALID_PHONE_POOL: Final = 1 << 8
_EMAIL_DOMAIN_POOL: Final = 1 << 10

# picked by 3, 6 and 4 bits
assert (len(PLANS), len(CITIES), len(SEGMENTS)) == (8, 64, 16)


def ascii_fold(text: str) -> str:
    """'Conceição' -> 'Conceicao'."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


# "Maria José" -> "mariajose", "D'Ávila" -> "davila"
_EMAIL_WORD: Final = {
    word: re.sub(r"[^a-z]", "", ascii_fold(word).lower())
    for word in (*FIRST_NAMES, *LAST_NAMES, *(c.rsplit(" ", 1)[1] for c in COMPOUND_SURNAMES))
}


def _make_name(rng: random.Random) -> tuple[str, str]:
    """(display name, e-mail local part derived from it)."""
    first = rng.choice(FIRST_NAMES)
    last = rng.choice(LAST_NAMES)
    roll = rng.random()
    if roll < 0.45:
        middle = rng.choice(LAST_NAMES)
        surname = f"{middle} {last}" if middle != last else last
    elif roll < 0.60:
        surname = rng.choice(COMPOUND_SURNAMES)
        last = surname.rsplit(" ", 1)[1]
    else:
        surname = last
    f_ascii, l_ascii = _EMAIL_WORD[first], _EMAIL_WORD[last]
    local = rng.choice(
        (
            f"{f_ascii}.{l_ascii}",
            f"{f_ascii}.{l_ascii}",
            f"{f_ascii}{l_ascii}",
            f"{f_ascii}_{l_ascii}",
            f"{f_ascii[0]}.{l_ascii}",
            f"{l_ascii}.{f_ascii}",
        )
    )
    style = rng.random()
    if style < 0.05:
        name = f"{last}, {first}"  # a comma inside: quoted in CSV
    elif style < 0.08:
        name = f"{first} {surname}".upper()
    elif style < 0.10:
        name = f"{first} {surname}".lower()
    elif style < 0.115:
        name = f'{first} "{rng.choice(NICKNAMES)}" {surname}'  # doubled quotes in CSV
    else:
        name = f"{first} {surname}"
    return name, local


def _make_address(rng: random.Random) -> str:
    street = f"{rng.choice(STREET_TYPES)} {rng.choice(STREET_NAMES)}"
    number = "s/n" if rng.random() < 0.03 else str(rng.randint(1, 4999))
    complement = rng.choice(COMPLEMENTS)
    parts = [street, number, complement] if complement else [street, number]
    return f"{', '.join(parts)} - {rng.choice(NEIGHBORHOODS)}"


def _make_invalid_phone(rng: random.Random) -> str:
    n = rng.randrange(10**8)
    roll = rng.random()
    if roll < 0.45:  # an area code that does not exist
        return f"({rng.choice(INVALID_DDDS)}) 9{n // 10000:04d}-{n % 10000:04d}"
    if roll < 0.8:  # a digit missing
        return f"({rng.choice(DDDS)[0]}) 9{n // 10000:04d}-{n % 1000:03d}"
    if roll < 0.9:
        return f"{n % 100000:05d}"
    return rng.choice(("não tem", "sem celular", "0000-0000", "9999999"))


# --------------------------------------------------------------------------------------
# Encodings and pools
# --------------------------------------------------------------------------------------
def _csv_cell(value: str) -> str:
    if any(c in value for c in ',"\r\n') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


def _json_cell(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class _Codec:
    """How a row's 9 cells are written: ``seps[i]`` precedes cell i, ``seps[9]`` ends it.

    In JSONL the key, e-mail and phone cells sit between quotes given by ``seps`` (they
    never need escaping); the others are JSON string literals.
    """

    encode: Callable[[str], str]
    seps: tuple[str, ...]


_CSV: Final = _Codec(_csv_cell, ("", ",", ",", ",", ",", ",", ",", ",", ",", "\n"))
_JSONL: Final = _Codec(
    _json_cell,
    (
        '{"nome":',
        ',"cpf":"',
        '","email":"',
        '","celular":"',
        '","whatsapp":"',
        '","endereco":',
        ',"plano":',
        ',"cidade":',
        ',"segmento":',
        "}\n",
    ),
)


@dataclass(frozen=True, slots=True)
class _Pools:
    """Pre-encoded bytes: a row is a few look-ups and one 9-item join.

    ``names`` carry the separators before and after the name cell and ``tails`` the
    ones around endereco, plano, cidade and segmento up to the end of the row, so a row
    is ``names[i] + key + sep2 + email + sep3 + phone + sep4 + whatsapp + tails[j]``.
    """

    names: list[bytes]
    empty_name: bytes
    name_locals: list[bytes]  # e-mail local part derived from the same name
    tails: list[bytes]  # ~2% addresses and ~3% of each custom value empty
    sparse_tails: list[bytes]  # each of the 4 cells empty half the time
    at_domains: list[bytes]  # "<suffix>@<domain>", suffix often empty
    bad_domains: list[bytes]  # the same without the "@"
    prefixes: list[list[bytes]]  # per phone style, per DDD slot (weighted, 128)
    lines: list[list[bytes]]  # per phone style: "9XXXX-XXXX" or "9XXXXXXXX"
    invalid_phones: list[bytes]
    sep2: bytes
    sep3: bytes
    sep4: bytes


def _build_pools(rng: random.Random, codec: _Codec) -> _Pools:
    enc, seps = codec.encode, codec.seps
    # Names, tails and phone lines are distinct, so that a repeat's other index really
    # gives another name, another line and other address/custom values.
    names: list[bytes] = []
    name_locals: list[bytes] = []
    seen: set[bytes] = set()
    while len(names) < _NAME_POOL:
        name, local = _make_name(rng)
        cell = f"{seps[0]}{enc(name)}{seps[1]}".encode()
        if cell not in seen:
            seen.add(cell)
            names.append(cell)
            name_locals.append(local.encode())
    empty = enc("")
    addresses = [enc(_make_address(rng)) for _ in range(_ADDRESS_POOL)]
    plans, cities, segments = ([enc(v) for v in values] for values in (PLANS, CITIES, SEGMENTS))

    def tail(keep: int, r: int) -> bytes:
        """Cells 5-8 and the end of the row; bit i of ``keep`` clear -> cell 5+i empty."""
        return (
            f"{seps[5]}{addresses[r & 0x1FFF] if keep & 1 else empty}"
            f"{seps[6]}{plans[(r >> 13) & 7] if keep & 2 else empty}"
            f"{seps[7]}{cities[(r >> 16) & 63] if keep & 4 else empty}"
            f"{seps[8]}{segments[(r >> 22) & 15] if keep & 8 else empty}{seps[9]}"
        ).encode()

    tails: list[bytes] = []
    seen.clear()
    while len(tails) < _TAIL_POOL:
        r = rng.getrandbits(64)
        keep = (
            ((r >> 26) & 63 != 0)
            | ((r >> 32) & 31 != 0) << 1
            | ((r >> 37) & 31 != 0) << 2
            | ((r >> 42) & 31 != 0) << 3
        )
        cells = tail(keep, r)
        if cells not in seen:
            seen.add(cells)
            tails.append(cells)
    sparse_tails = [tail(rng.getrandbits(4), rng.getrandbits(26)) for _ in range(_SPARSE_TAIL_POOL)]

    suffixes = [""] * 80 + [
        str(rng.randint(1, 99) if rng.random() < 0.6 else rng.randint(1960, 2008))
        for _ in range(48)
    ]
    at_domains: list[bytes] = []
    bad_domains: list[bytes] = []
    for _ in range(_EMAIL_DOMAIN_POOL):
        suffix = rng.choice(suffixes)
        domain = rng.choices(EMAIL_DOMAINS, _EMAIL_DOMAIN_WEIGHTS)[0]
        at_domains.append(f"{suffix}@{domain}".encode())
        bad_domains.append(f"{suffix}{rng.choice(('', '.', ' '))}{domain}".encode())

    weighted = [d for d, w in DDDS for _ in range(w)]
    slots = [weighted[(i * len(weighted)) // 128] for i in range(128)]
    rng.shuffle(slots)
    numbers = rng.sample(range(10**8), _LINE_POOL)
    dash = [f"9{n // 10000:04d}-{n % 10000:04d}".encode() for n in numbers]
    plain = [f"9{n:08d}".encode() for n in numbers]
    return _Pools(
        names=names,
        empty_name=f"{seps[0]}{empty}{seps[1]}".encode(),
        name_locals=name_locals,
        tails=tails,
        sparse_tails=sparse_tails,
        at_domains=at_domains,
        bad_domains=bad_domains,
        prefixes=[[p.format(d).encode() for d in slots] for p in _PHONE_PREFIXES],
        lines=[dash, plain, dash, dash],
        invalid_phones=[_make_invalid_phone(rng).encode() for _ in range(_INVALID_PHONE_POOL)],
        sep2=seps[2].encode(),
        sep3=seps[3].encode(),
        sep4=seps[4].encode(),
    )


@dataclass(frozen=True, slots=True)
class _KeyTables:
    """Key halves as bytes and check-digit classes, indexed by the half.

    A half's class packs its two partial sums (mod 11) so that one look-up gives both
    check digits: ``chk[hc[hi] + lc[lo]]``.
    """

    d4: list[bytes]  # 123 -> b"0123"
    d5: list[bytes]  # 1234 -> b"01234"
    cpf_d4: list[bytes]  # CPF hi index -> its 4 digits
    cpf_hi: list[bytes]  # CPF hi index -> b"123.4"
    cpf_lo: list[bytes]  # 56789 -> b"56.789-"
    cnpj_hi: list[bytes]  # 1234 -> b"12.34"
    cnpj_lo: list[bytes]  # 5678 -> b"5.678"
    branches: list[bytes]  # b"0001"
    branch_fmt: list[bytes]  # b"/0001-"
    cpf_hc: list[int]
    cpf_lc: list[int]
    cnpj_hc: list[list[int]]  # per branch
    cnpj_lc: list[int]
    chk: list[bytes]

    @classmethod
    def build(cls, ks: KeySpace) -> _KeyTables:
        d4 = [f"{i:04d}" for i in range(10_000)]
        d5 = [f"{i:05d}" for i in range(100_000)]
        cpf_d4 = [d4[v] for v in ks.cpf_hi_values]
        chk = [b""] * 11**4
        for a, b, c, d in itertools.product(range(11), repeat=4):
            d1 = _DV_TABLE[a + c]
            chk[(a * 11 + b) * 121 + c * 11 + d] = f"{d1}{_DV_TABLE[b + d + 2 * d1]}".encode()
        return cls(
            d4=[s.encode() for s in d4],
            d5=[s.encode() for s in d5],
            cpf_d4=[s.encode() for s in cpf_d4],
            cpf_hi=[f"{s[:3]}.{s[3]}".encode() for s in cpf_d4],
            cpf_lo=[f"{s[:2]}.{s[2:]}-".encode() for s in d5],
            cnpj_hi=[f"{s[:2]}.{s[2:]}".encode() for s in d4],
            cnpj_lo=[f"{s[0]}.{s[1:]}".encode() for s in d4],
            branches=[b.encode() for b in _BRANCHES],
            branch_fmt=[f"/{b}-".encode() for b in _BRANCHES],
            cpf_hc=[(ks.cpf_h1[v] * 11 + ks.cpf_h2[v]) * 121 for v in ks.cpf_hi_values],
            cpf_lc=[c * 11 + d for c, d in zip(ks.cpf_l1, ks.cpf_l2, strict=True)],
            cnpj_hc=[
                [
                    ((a + b1) % 11 * 11 + (b + b2) % 11) * 121
                    for a, b in zip(ks.cnpj_h1, ks.cnpj_h2, strict=True)
                ]
                for b1, b2 in zip(ks.branch_1, ks.branch_2, strict=True)
            ],
            cnpj_lc=[c * 11 + d for c, d in zip(ks.cnpj_l1, ks.cnpj_l2, strict=True)],
            chk=chk,
        )


# --------------------------------------------------------------------------------------
# Output and statistics
# --------------------------------------------------------------------------------------
@contextmanager
def _open_output(path: Path, *, gzip_level: int | None) -> Iterator[BinaryIO]:
    """Write ``<path>.partial`` then rename it: a file under its final name is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        with open(tmp, "wb", buffering=WRITE_BUFFER) as raw:
            if gzip_level is None:
                yield raw
            else:
                # no file name and mtime 0 in the header: byte-identical across runs
                with gzip_module.GzipFile(
                    filename="", mode="wb", fileobj=raw, compresslevel=gzip_level, mtime=0
                ) as gz:
                    yield gz  # type: ignore[misc]
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def meta_path_for(out: Path) -> Path:
    """``data/contacts.csv`` -> ``data/contacts.csv.meta.json``."""
    return out.with_name(out.name + ".meta.json")


@dataclass(frozen=True, slots=True)
class GenerationStats:
    """What was written.  ``rows`` is the number of records an importer must read."""

    rows: int
    distinct_keys: int  # distinct valid keys (inserted into an empty client)
    bad_check_digits: int  # rows whose key fails its check digits (invalid)
    repeated_rows: int  # valid rows whose key came earlier (updated / ignored)
    near_repeats: int
    far_repeats: int
    preexisting_keys: int  # rows of the preexisting file, each a distinct main-file key
    cpf_keys: int  # distinct valid keys by kind
    cnpj_keys: int
    cnpj_alnum_keys: int
    empty_emails: int  # rows whose cell is empty (these counters describe the file)
    malformed_emails: int  # non-empty without "@"
    empty_phones: int  # celular
    invalid_phones: int  # non-empty, not a valid Brazilian mobile
    empty_whatsapps: int
    invalid_whatsapps: int
    seed: int
    fmt: str
    gzip: bool
    gzip_level: int | None
    out: Path
    out_bytes: int
    meta_out: Path | None
    preexisting_out: Path | None
    preexisting_bytes: int
    preexisting_ratio: float

    def expected(self) -> dict[str, dict[str, int]]:
        """Counters an exact importer reports (see the module docstring)."""
        d, p = self.distinct_keys, self.preexisting_keys
        rep, bad = self.repeated_rows, self.bad_check_digits

        def counters(inserted: int, updated: int, ignored: int, invalid: int) -> dict[str, int]:
            return {
                "inserted": inserted,
                "updated": updated,
                "ignored": ignored,
                "invalid": invalid,
            }

        out = {
            "empty_client_merge": counters(d, rep, 0, bad),
            "empty_client_discard": counters(d, 0, rep, bad),
        }
        if self.preexisting_out is not None:
            out["preexisting_into_empty_client"] = counters(p, 0, 0, 0)
            out["after_preexisting_merge"] = counters(d - p, rep + p, 0, bad)
            out["after_preexisting_discard"] = counters(d - p, 0, rep + p, bad)
        return out

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()
        }
        data["generator_version"] = GENERATOR_VERSION
        data["header"] = list(HEADER)
        data["expected"] = self.expected()
        return data


class _Counts:
    __slots__ = (
        "bad",
        "empty_emails",
        "empty_phones",
        "empty_whatsapps",
        "far",
        "invalid_phones",
        "invalid_whatsapps",
        "malformed_emails",
        "near",
        "new",
        "pre",
    )

    def __init__(self) -> None:
        self.new = self.bad = self.near = self.far = self.pre = 0
        self.empty_emails = self.malformed_emails = 0
        self.empty_phones = self.invalid_phones = 0
        self.empty_whatsapps = self.invalid_whatsapps = 0


# --------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------
def generate(
    rows: int,
    seed: int,
    out: Path,
    *,
    preexisting_out: Path | None = None,
    preexisting_ratio: float = 0.3,
    fmt: str = "csv",
    gzip: bool = False,
    gzip_level: int = 1,
    write_meta: bool = True,
) -> GenerationStats:
    """Write ``rows`` records to ``out``, the preexisting file and ``<out>.meta.json``.

    Streaming: memory does not depend on ``rows``.  ``preexisting_out`` is always a plain
    UTF-8 CSV with the same header, whatever ``fmt`` and ``gzip`` the main file uses.
    Files are written under ``<name>.partial`` and renamed when complete.
    """
    if not 0 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be within [0, {MAX_ROWS}], not {rows}")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
    if not 0.0 <= preexisting_ratio <= 1.0:
        raise ValueError(f"preexisting_ratio must be within [0, 1], not {preexisting_ratio}")
    if not 0 <= gzip_level <= 9:
        raise ValueError(f"gzip_level must be within [0, 9], not {gzip_level}")
    out = Path(out)
    pre_path = Path(preexisting_out) if preexisting_out is not None else None

    ks = KeySpace(seed)
    codec = _JSONL if fmt == "jsonl" else _CSV
    # Pools (the same strings in both encodings), rows and the preexisting file each
    # have their own generator, so the main file does not depend on preexisting_out.
    pools_seed = f"importer-benchmark-pools/{seed}"
    pools = _build_pools(random.Random(pools_seed), codec)
    counts = _Counts()
    header = b"" if codec is _JSONL else (",".join(HEADER) + "\n").encode()
    with _open_output(out, gzip_level=gzip_level if gzip else None) as main_f:
        main_f.write(header)
        if pre_path is None:
            _write_rows(rows, random.Random(seed), ks, pools, main_f, counts, None)
        else:
            pre_pools = pools if codec is _CSV else _build_pools(random.Random(pools_seed), _CSV)
            with _open_output(pre_path, gzip_level=None) as pre_f:
                pre_f.write((",".join(HEADER) + "\n").encode())
                pre = _Preexisting(
                    random.Random(f"importer-benchmark-preexisting/{seed}"),
                    pre_pools,
                    pre_f,
                    min(int(preexisting_ratio * 2**64), 2**64),
                )
                _write_rows(rows, random.Random(seed), ks, pools, main_f, counts, pre)

    cpf, cnpj, alnum = ks.count_kinds(counts.new)
    stats = GenerationStats(
        rows=rows,
        distinct_keys=counts.new,
        bad_check_digits=counts.bad,
        repeated_rows=counts.near + counts.far,
        near_repeats=counts.near,
        far_repeats=counts.far,
        preexisting_keys=counts.pre,
        cpf_keys=cpf,
        cnpj_keys=cnpj,
        cnpj_alnum_keys=alnum,
        empty_emails=counts.empty_emails,
        malformed_emails=counts.malformed_emails,
        empty_phones=counts.empty_phones,
        invalid_phones=counts.invalid_phones,
        empty_whatsapps=counts.empty_whatsapps,
        invalid_whatsapps=counts.invalid_whatsapps,
        seed=seed,
        fmt=fmt,
        gzip=gzip,
        gzip_level=gzip_level if gzip else None,
        out=out,
        out_bytes=out.stat().st_size,
        meta_out=meta_path_for(out) if write_meta else None,
        preexisting_out=pre_path,
        preexisting_bytes=pre_path.stat().st_size if pre_path is not None else 0,
        preexisting_ratio=preexisting_ratio,
    )
    if stats.meta_out is not None:
        stats.meta_out.write_text(
            json.dumps(stats.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return stats


@dataclass(frozen=True, slots=True)
class _Preexisting:
    rng: random.Random
    pools: _Pools  # CSV
    out: BinaryIO
    threshold: int  # Weyl values below it are preexisting keys


def _write_rows(
    rows: int,
    rng: random.Random,
    ks: KeySpace,
    pools: _Pools,
    out_f: BinaryIO,
    counts: _Counts,
    pre: _Preexisting | None,
) -> None:
    """The hot loop: one pass, bounded buffers, every decision from ``rng`` or ``ks``.

    ``KeySpace.mix``/``parts`` and ``_render_key``'s common styles are inlined here (the
    rows/s figure is this loop); the tests check the file's keys against ``KeySpace``.

    Random bits: r1 0-15 row kind, 16 near/far, 17-31 near offset, 32-36 key style,
    37-46 e-mail roll, 47-56 e-mail domain, 57-58 phone style, 59-63 wrong digit;
    r3 0-9 phone roll, 10-19 whatsapp roll, 20-21 its style, 22-28 its DDD slot,
    29-44 its line, 45-52 invalid phone.
    Key mix: 0-9 kind, 10-23 name, 24-39 phone line, 40-46 DDD slot, 44-59 tail,
    60-63 branch.  Preexisting row (its own generator): 0-12 name offset, 13-27 line
    offset, 28-42 tail offset, 43-44 phone style, 45 whatsapp = phone, 46-47 its style,
    48-54 its DDD slot, 54-63 e-mail domain.
    """
    getrandbits = rng.getrandbits
    join = b"".join
    # key space
    mix_lo, mix_hi = ks.mix_lo, ks.mix_hi
    cf1, cf2, nf1, nf2 = ks.cpf_f1, ks.cpf_f2, ks.cnpj_f1, ks.cnpj_f2
    cpf_hi_n = _CPF_HI
    alnum_parts = ks.alnum_parts
    kt = _KeyTables.build(ks)
    d4, d5, cpf_d4, cpf_hi_s, cpf_lo_s = kt.d4, kt.d5, kt.cpf_d4, kt.cpf_hi, kt.cpf_lo
    cnpj_hi_s, cnpj_lo_s, branches, branch_fmt = kt.cnpj_hi, kt.cnpj_lo, kt.branches, kt.branch_fmt
    cpf_hc, cpf_lc, cnpj_hc, cnpj_lc, chk = kt.cpf_hc, kt.cpf_lc, kt.cnpj_hc, kt.cnpj_lc, kt.chk
    render = _render_key
    # values
    names, name_locals, empty_name = pools.names, pools.name_locals, pools.empty_name
    tails, sparse_tails = pools.tails, pools.sparse_tails
    at_domains, bad_domains = pools.at_domains, pools.bad_domains
    phone_parts = list(zip(pools.prefixes, pools.lines, strict=True))
    invalid_phones = pools.invalid_phones
    invalid_set = frozenset(invalid_phones)  # never equal to a valid phone
    sep2, sep3, sep4 = pools.sep2, pools.sep3, pools.sep4
    bad_t, repeat_t, cpf_t, cnpj_t = _BAD_T, _REPEAT_T, _CPF_T, _CNPJ_T
    # Weyl sequence over new keys k = 0, 1, 2, ...: see KeySpace.preexisting_weyl.
    pre_threshold = pre.threshold if pre is not None else -1
    weyl, golden, m64 = ks.pre_offset, _GOLDEN64, _M64
    pre_buf: list[bytes] = []
    pre_append = pre_buf.append
    # without a preexisting file these are never used (pre_threshold is -1)
    pp = pre.pools if pre is not None else pools
    pre_bits = pre.rng.getrandbits if pre is not None else getrandbits
    pre_names, pre_locals, pre_at_domains, pre_tails = (
        pp.names,
        pp.name_locals,
        pp.at_domains,
        pp.tails,
    )
    pre_phone_parts = list(zip(pp.prefixes, pp.lines, strict=True))

    buf: list[bytes] = []
    append = buf.append
    new = 0
    remaining = rows
    while remaining:
        batch = min(remaining, BATCH_ROWS)
        remaining -= batch
        for _ in range(batch):
            r1 = getrandbits(64)
            r3 = getrandbits(64)
            roll = r1 & 0xFFFF
            if roll >= repeat_t or not new:
                k = new  # a new contact
                new += 1
                fresh = True
            else:
                fresh = False
                if roll < bad_t:
                    k = new  # the next contact, its key mistyped below
                elif r1 & 0x10000:
                    k = new - 1 - ((r1 >> 17) & 0x7FFF) % min(new, NEAR_WINDOW)
                    counts.near += 1
                else:
                    k = (getrandbits(32) * new) >> 32
                    counts.far += 1

            # ---- key: KeySpace.mix / parts and _render_key, inlined ----
            h = mix_lo[k & 0xFFFF] ^ mix_hi[k >> 16]
            kind_roll = h & 1023
            style = (r1 >> 32) & 31
            if kind_roll < cpf_t:
                hi, lo = divmod(k, 100_000)
                hi = (hi + cf1[lo]) % cpf_hi_n
                lo = (lo + cf2[hi]) % 100_000
                dv = chk[cpf_hc[hi] + cpf_lc[lo]]
                if style < 14:
                    key = cpf_hi_s[hi] + cpf_lo_s[lo] + dv
                elif style < 28:
                    key = cpf_d4[hi] + d5[lo] + dv
                else:
                    key = render((cpf_d4[hi] + d5[lo]).decode(), dv.decode(), style).encode()
            elif kind_roll < cnpj_t:
                bi = h >> 60
                hi, lo = divmod(k, 10_000)
                hi = (hi + nf1[lo]) % 10_000
                lo = (lo + nf2[hi]) % 10_000
                dv = chk[cnpj_hc[bi][hi] + cnpj_lc[lo]]
                if style < 14:
                    key = cnpj_hi_s[hi] + cnpj_lo_s[lo] + branch_fmt[bi] + dv
                elif style < 28:
                    key = d4[hi] + d4[lo] + branches[bi] + dv
                else:
                    base = (d4[hi] + d4[lo] + branches[bi]).decode()
                    key = render(base, dv.decode(), style).encode()
            else:
                key = render(*alnum_parts(k, h >> 60), style).encode()

            # ---- values: a first occurrence's come from the key's mix; repeats differ ----
            name_i = (h >> 10) & 0x3FFF
            line_i = (h >> 24) & 0xFFFF
            name = names[name_i]
            if fresh:
                tail = tails[(h >> 44) & 0xFFFF]
                if weyl < pre_threshold:
                    # An older, fully valid version of this contact (CSV): the key as
                    # written here; another name (and e-mail), phone line, address and
                    # custom values; the same DDD.
                    r = pre_bits(64)
                    p_name_i = (name_i + 1 + (r & 0x1FFF)) & 0x3FFF
                    p_line_i = (line_i + 1 + ((r >> 13) & 0x7FFF)) & 0xFFFF
                    prefix, lines = pre_phone_parts[(r >> 43) & 3]
                    p_phone = prefix[(h >> 40) & 127] + lines[p_line_i]
                    if (r >> 45) & 1:
                        p_whatsapp = p_phone
                    else:
                        prefix, lines = pre_phone_parts[(r >> 46) & 3]
                        p_whatsapp = prefix[(r >> 48) & 127] + lines[p_line_i ^ 0x5A5A]
                    pre_append(
                        join(
                            (
                                pre_names[p_name_i],
                                key,
                                b",",
                                pre_locals[p_name_i] + pre_at_domains[r >> 54],
                                b",",
                                p_phone,
                                b",",
                                p_whatsapp,
                                pre_tails[
                                    (((h >> 44) & 0xFFFF) + 1 + ((r >> 28) & 0x7FFF)) & 0xFFFF
                                ],
                            )
                        )
                    )
                weyl = (weyl + golden) & m64
                sparse = 0
            elif roll < bad_t:
                key = _bad_key(ks, k, style, r1 >> 59)
                tail = tails[(h >> 44) & 0xFFFF]
                counts.bad += 1
                sparse = 0
            else:
                r2 = getrandbits(64)
                name_i = (name_i + 1 + (r2 & 0x1FFF)) & 0x3FFF
                name = names[name_i]
                line_i = (line_i + 1 + ((r2 >> 13) & 0x7FFF)) & 0xFFFF
                if (r2 >> 28) & 3:
                    tail = tails[(((h >> 44) & 0xFFFF) + 1 + ((r2 >> 30) & 0x7FFF)) & 0xFFFF]
                    sparse = 0
                else:  # a quarter of repeats leave some fields empty
                    tail = sparse_tails[(r2 >> 30) & 0xFFF]
                    sparse = (r2 >> 42) | 0x10  # bit i clear -> field i left empty

            e_roll = (r1 >> 37) & 1023  # e-mail, derived from the name
            if e_roll >= 41:
                email = name_locals[name_i] + at_domains[(r1 >> 47) & 1023]
            elif e_roll < 31:
                email = b""
                counts.empty_emails += 1
            else:
                email = name_locals[name_i] + bad_domains[(r1 >> 47) & 1023]
                counts.malformed_emails += 1

            p_roll = r3 & 1023  # celular: DDD and line from the key's mix
            if p_roll >= 112:
                prefix, lines = phone_parts[(r1 >> 57) & 3]
                phone = prefix[(h >> 40) & 127] + lines[line_i]
            elif p_roll < 102:
                phone = b""
                counts.empty_phones += 1
                if (r3 >> 10) & 1023 < 512:
                    counts.empty_whatsapps += 1  # the copy below
            else:
                phone = invalid_phones[(r3 >> 45) & 255]
                counts.invalid_phones += 1
                if (r3 >> 10) & 1023 < 512:
                    counts.invalid_whatsapps += 1  # the copy below

            w_roll = (r3 >> 10) & 1023  # whatsapp: the same text half the time
            if w_roll < 512:
                whatsapp = phone
            elif w_roll >= 568:
                prefix, lines = phone_parts[(r3 >> 20) & 3]
                whatsapp = prefix[(r3 >> 22) & 127] + lines[(r3 >> 29) & 0xFFFF]
            elif w_roll < 563:
                whatsapp = b""
                counts.empty_whatsapps += 1
            else:
                whatsapp = invalid_phones[(r3 >> 45) & 255]
                counts.invalid_whatsapps += 1

            if sparse:  # blank some fields, keeping the counters true to the file
                if not sparse & 1:
                    name = empty_name
                if not sparse & 2 and email:
                    counts.empty_emails += 1
                    counts.malformed_emails -= b"@" not in email
                    email = b""
                if not sparse & 4 and phone:
                    counts.empty_phones += 1
                    counts.invalid_phones -= phone in invalid_set
                    phone = b""
                if not sparse & 8 and whatsapp:
                    counts.empty_whatsapps += 1
                    counts.invalid_whatsapps -= whatsapp in invalid_set
                    whatsapp = b""
            append(join((name, key, sep2, email, sep3, phone, sep4, whatsapp, tail)))
        out_f.write(join(buf))
        buf.clear()
        if pre_buf:
            assert pre is not None
            pre.out.write(join(pre_buf))
            counts.pre += len(pre_buf)
            pre_buf.clear()
    counts.new = new


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------
def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="generate.py",
        description="Deterministic generator of realistic Brazilian contact files.",
    )
    p.add_argument("--rows", type=int, required=True, help="records to write (no header)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True, help="main file; meta: OUT.meta.json")
    p.add_argument("--preexisting-out", type=Path, default=None, help="older contacts (CSV)")
    p.add_argument("--preexisting-ratio", type=float, default=0.3)
    p.add_argument("--format", dest="fmt", choices=FORMATS, default="csv")
    p.add_argument("--gzip", action="store_true", help="gzip the main file")
    p.add_argument("--gzip-level", type=int, default=1)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the meta JSON on stdout and the throughput on stderr."""
    args = _parse_args(argv)
    started = time.perf_counter()
    try:
        stats = generate(
            args.rows,
            args.seed,
            args.out,
            preexisting_out=args.preexisting_out,
            preexisting_ratio=args.preexisting_ratio,
            fmt=args.fmt,
            gzip=args.gzip,
            gzip_level=args.gzip_level,
        )
    except (ValueError, OSError) as exc:
        print(f"generate.py: error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    rate = stats.rows / elapsed if elapsed > 0 else float("inf")
    print(json.dumps(stats.to_json(), ensure_ascii=False))
    print(
        f"generate.py: {stats.rows} rows, {stats.out_bytes / 2**20:.1f} MiB -> {stats.out} "
        f"in {elapsed:.2f} s ({rate:,.0f} rows/s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

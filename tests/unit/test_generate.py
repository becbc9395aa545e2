"""benchmarks/generate.py: deterministic, well-formed, and the ratios it promises.

The key checks here are an independent implementation of the SPEC's normalization and
check-digit rules, not the generator's own tables.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

GENERATE_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "generate.py"
HEADER = ["nome", "cpf", "email", "celular", "whatsapp", "endereco", "plano", "cidade", "segmento"]
ROWS = 20_000
SEED = 20260701


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_generate", GENERATE_PY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


gen = _load()


# --------------------------------------------------------------------------------------
# Independent key rules (SPEC "Validation and normalization")
# --------------------------------------------------------------------------------------
def normalize_key(raw: str) -> str:
    key = re.sub(r"[.\-/ ]", "", raw.strip().upper())
    if key.isdigit():
        if len(key) < 11:
            key = key.zfill(11)
        elif len(key) in (12, 13):
            key = key.zfill(14)
    return key


def _digit(values: list[int], weights: list[int]) -> int:
    rem = sum(v * w for v, w in zip(values, weights, strict=True)) % 11
    return 0 if rem < 2 else 11 - rem


def valid_cpf(key: str) -> bool:
    if not re.fullmatch(r"\d{11}", key) or len(set(key)) == 1:
        return False
    v = [int(c) for c in key]
    d1 = _digit(v[:9], list(range(10, 1, -1)))
    d2 = _digit([*v[:9], d1], list(range(11, 1, -1)))
    return v[9:] == [d1, d2]


def valid_cnpj(key: str) -> bool:
    if not re.fullmatch(r"[0-9A-Z]{12}\d{2}", key) or len(set(key)) == 1:
        return False
    v = [ord(c) - 48 for c in key]
    w1 = [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]
    d1 = _digit(v[:12], w1)
    d2 = _digit([*v[:12], d1], [6, *w1])
    return v[12:] == [d1, d2]


def valid_key(key: str) -> bool:
    return valid_cpf(key) if len(key) == 11 else valid_cnpj(key)


def test_independent_rules_on_known_documents() -> None:
    assert valid_key(normalize_key("529.982.247-25"))
    assert not valid_key(normalize_key("529.982.247-24"))
    assert valid_key(normalize_key("11.222.333/0001-81"))
    assert valid_key(normalize_key("12.ABC.345/01DE-35"))  # SERPRO's example
    assert not valid_key(normalize_key("111.111.111-11"))
    assert normalize_key("191") == "00000000191"
    assert gen.cpf_check_digits("529982247") == "25"
    assert gen.cnpj_check_digits("12ABC34501DE") == "35"


# --------------------------------------------------------------------------------------
# One generated data set shared by most tests
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Generated:
    stats: Any  # GenerationStats of the dynamically loaded module
    main: Path
    pre: Path
    rows: list[list[str]]
    pre_rows: list[list[str]]


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, list(reader)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    d = tmp_path_factory.mktemp("gen")
    stats = gen.generate(ROWS, SEED, d / "contacts.csv", preexisting_out=d / "pre.csv")
    _, rows = _read_csv(d / "contacts.csv")
    _, pre_rows = _read_csv(d / "pre.csv")
    return Generated(stats, d / "contacts.csv", d / "pre.csv", rows, pre_rows)


def _first_occurrences(rows: list[list[str]]) -> dict[str, tuple[int, list[str]]]:
    first: dict[str, tuple[int, list[str]]] = {}
    for i, row in enumerate(rows):
        key = normalize_key(row[1])
        if valid_key(key) and key not in first:
            first[key] = (i, row)
    return first


# --------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------
def _outputs(d: Path, seed: int, **kwargs: object) -> tuple[bytes, bytes, dict[str, object]]:
    stats = gen.generate(3_000, seed, d / "a.csv", preexisting_out=d / "p.csv", **kwargs)
    meta = json.loads(stats.meta_out.read_text(encoding="utf-8"))
    for path_field in ("out", "meta_out", "preexisting_out"):
        meta.pop(path_field)
    return (d / "a.csv").read_bytes(), (d / "p.csv").read_bytes(), meta


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    (tmp_path / "3").mkdir()
    first = _outputs(tmp_path / "1", 7)
    assert _outputs(tmp_path / "2", 7) == first
    other = _outputs(tmp_path / "3", 8)
    assert other[0] != first[0]
    assert other[1] != first[1]


def test_main_file_does_not_depend_on_preexisting_file(tmp_path: Path) -> None:
    gen.generate(2_000, 3, tmp_path / "a.csv", preexisting_out=tmp_path / "p.csv")
    gen.generate(2_000, 3, tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_gzip_is_deterministic_and_holds_the_csv(tmp_path: Path) -> None:
    gen.generate(2_000, 5, tmp_path / "plain.csv")
    gen.generate(2_000, 5, tmp_path / "a.csv.gz", gzip=True)
    gen.generate(2_000, 5, tmp_path / "b.csv.gz", gzip=True)
    assert (tmp_path / "a.csv.gz").read_bytes() == (tmp_path / "b.csv.gz").read_bytes()
    assert (
        gzip.decompress((tmp_path / "a.csv.gz").read_bytes())
        == (tmp_path / "plain.csv").read_bytes()
    )


def test_no_partial_file_left(tmp_path: Path) -> None:
    gen.generate(100, 1, tmp_path / "a.csv", preexisting_out=tmp_path / "p.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.csv.meta.json", "p.csv"]


# --------------------------------------------------------------------------------------
# Shape
# --------------------------------------------------------------------------------------
def test_header_and_every_record_has_nine_fields(data: Generated) -> None:
    raw = data.main.read_bytes()
    assert raw.startswith(b"nome,cpf,email,celular,whatsapp,endereco,plano,cidade,segmento\n")
    header, _ = _read_csv(data.main)
    assert header == HEADER
    assert all(len(row) == 9 for row in data.rows)
    raw.decode("utf-8")  # valid UTF-8, no BOM
    assert not raw.startswith(b"\xef\xbb\xbf")
    assert b"\r" not in raw
    assert b"\x00" not in raw


def test_row_count_matches_stats_and_meta(data: Generated) -> None:
    stats = data.stats
    meta = json.loads(gen.meta_path_for(data.main).read_text(encoding="utf-8"))
    assert len(data.rows) == stats.rows == meta["rows"] == ROWS
    assert data.main.read_bytes().count(b"\n") == ROWS + 1  # no quoted newlines
    for field in ("distinct_keys", "bad_check_digits", "repeated_rows", "preexisting_keys"):
        assert meta[field] == getattr(stats, field)
    assert meta["out"] == str(data.main)
    assert meta["preexisting_out"] == str(data.pre)
    assert meta["header"] == HEADER
    assert meta["out_bytes"] == data.main.stat().st_size
    assert stats.rows == stats.distinct_keys + stats.bad_check_digits + stats.repeated_rows
    expected = meta["expected"]
    assert expected["empty_client_merge"] == {
        "inserted": stats.distinct_keys,
        "updated": stats.repeated_rows,
        "ignored": 0,
        "invalid": stats.bad_check_digits,
    }
    assert expected["after_preexisting_discard"] == {
        "inserted": stats.distinct_keys - stats.preexisting_keys,
        "updated": 0,
        "ignored": stats.repeated_rows + stats.preexisting_keys,
        "invalid": stats.bad_check_digits,
    }


def test_keys_pass_or_fail_the_check_digits_as_counted(data: Generated) -> None:
    stats = data.stats
    keys = [normalize_key(row[1]) for row in data.rows]
    valid = [k for k in keys if valid_key(k)]
    invalid = [k for k in keys if not valid_key(k)]
    assert len(invalid) == stats.bad_check_digits
    assert len(set(valid)) == stats.distinct_keys
    assert len(valid) - len(set(valid)) == stats.repeated_rows
    # an invalid key is well formed, only its check digits are wrong
    for key in invalid:
        assert re.fullmatch(r"\d{11}|[0-9A-Z]{12}\d{2}", key), key
        base, dv = key[:-2], key[-2:]
        good = gen.cpf_check_digits(base) if len(key) == 11 else gen.cnpj_check_digits(base)
        assert dv[0] != good[0]


def test_keys_are_the_key_space_in_order(data: Generated) -> None:
    ks = gen.KeySpace(SEED)
    first = _first_occurrences(data.rows)
    in_order = sorted(first, key=lambda k: first[k][0])
    assert in_order == [ks.key(k) for k in range(data.stats.distinct_keys)]
    kinds = Counter(ks.kind(k) for k in range(data.stats.distinct_keys))
    assert kinds["cpf"] == data.stats.cpf_keys
    assert kinds["cnpj"] == data.stats.cnpj_keys
    assert kinds["cnpj_alnum"] == data.stats.cnpj_alnum_keys


def test_key_space_is_injective_and_counts_kinds() -> None:
    ks = gen.KeySpace(1)
    n = 200_000
    keys = {ks.key(k) for k in range(n)}
    assert len(keys) == n
    assert all(valid_key(key) for key in list(keys)[:20_000])
    kinds = Counter(ks.kind(k) for k in range(n))
    assert ks.count_kinds(n) == (kinds["cpf"], kinds["cnpj"], kinds["cnpj_alnum"])


def test_ratios(data: Generated) -> None:
    s = data.stats
    n = s.rows
    assert 0.015 < s.bad_check_digits / n < 0.025
    assert 0.085 < s.repeated_rows / n < 0.115
    assert 0.4 < s.near_repeats / s.repeated_rows < 0.6
    assert 0.67 < s.cpf_keys / s.distinct_keys < 0.73
    assert 0.24 < s.cnpj_keys / s.distinct_keys < 0.30
    assert 0.02 < s.cnpj_alnum_keys / s.distinct_keys < 0.04
    assert 0.29 < s.preexisting_keys / s.distinct_keys < 0.31
    rows = data.rows
    emails = [r[2] for r in rows]
    assert 0.02 < emails.count("") / n < 0.06  # ~3%, plus the emptied fields of repeats
    assert emails.count("") == s.empty_emails
    assert sum(1 for e in emails if e and "@" not in e) == s.malformed_emails
    assert 0.005 < s.malformed_emails / n < 0.015
    phones = [r[3] for r in rows]
    assert 0.08 < phones.count("") / n < 0.13
    assert 0.4 < sum(1 for r in rows if r[3] == r[4]) / n < 0.65
    domains = Counter(e.rsplit("@", 1)[1] for e in emails if "@" in e)
    assert set(domains) == {"gmail.com", "hotmail.com", "uol.com.br", "empresa.com.br"}
    raw_keys = [r[1] for r in rows]
    assert sum(1 for k in raw_keys if "." in k) / n > 0.35  # formatted
    assert sum(1 for k in raw_keys if k.isdigit()) / n > 0.35  # bare
    stripped = [k for k in raw_keys if k.isdigit() and len(k) not in (11, 14)]
    assert stripped, "some keys lost their leading zeros"
    assert all(normalize_key(k).startswith("0") for k in stripped)
    assert any(re.search(r"[A-Za-z]", k) for k in raw_keys)  # alphanumeric CNPJs
    assert any(k != k.strip() for k in raw_keys)


def test_names_addresses_and_custom_values_look_brazilian(data: Generated) -> None:
    rows = data.rows
    text = " ".join(r[0] for r in rows)
    for accented in ("João", "Conceição", "Antônio", "Ângela"):
        assert accented in text
    assert any("," in r[0] for r in rows)  # "Silva, João"
    assert any('"' in r[0] for r in rows)  # doubled quotes
    raw = data.main.read_text(encoding="utf-8")
    assert re.search(r'^"[^",]+, [^",]+",', raw, re.MULTILINE)
    assert all("," in r[5] for r in rows if r[5])
    assert any(re.search(r"\d", r[5]) for r in rows)
    assert {r[6] for r in rows} - {""} <= set(gen.PLANS)
    assert "São Paulo" in {r[7] for r in rows}
    assert {r[8] for r in rows} - {""} <= set(gen.SEGMENTS)


_PHONE = re.compile(
    r"\((\d\d)\) 9\d{4}-\d{4}|(\d\d)9\d{8}|\+55 (\d\d) 9\d{4}-\d{4}|(\d\d) 9\d{4}-\d{4}"
)


def valid_phone(value: str) -> bool:
    """A Brazilian mobile in one of the generator's formats, with a valid area code."""
    m = _PHONE.fullmatch(value)
    return m is not None and int(next(g for g in m.groups() if g)) in gen.VALID_DDDS


def test_phones_use_valid_area_codes_and_varied_formats(data: Generated) -> None:
    styles: Counter[str] = Counter()
    for row in data.rows:
        for value in (row[3], row[4]):
            if valid_phone(value):
                styles[value[0] if value[0] in "(+" else value[2]] += 1
    assert set(styles) == {"(", "+", "9", " "}
    s = data.stats
    phones, whatsapps = [r[3] for r in data.rows], [r[4] for r in data.rows]
    assert phones.count("") == s.empty_phones
    assert sum(1 for p in phones if p and not valid_phone(p)) == s.invalid_phones
    assert whatsapps.count("") == s.empty_whatsapps
    assert sum(1 for p in whatsapps if p and not valid_phone(p)) == s.invalid_whatsapps
    assert 0.005 < s.invalid_phones / s.rows < 0.015


def test_repeats_carry_other_values_and_some_empty_fields(data: Generated) -> None:
    first = _first_occurrences(data.rows)
    near = far = emptied = 0
    names_differ = phones_differ = 0
    index: dict[str, int] = {}  # key -> its rank among new keys
    for i, row in enumerate(data.rows):
        key = normalize_key(row[1])
        if not valid_key(key):
            continue
        if key not in index:
            index[key] = len(index)
            assert row[0], "a first occurrence always has a name"
            continue
        j, orig = first[key]
        assert j < i
        distance = len(index) - index[key]
        if distance <= 2 * gen.NEAR_WINDOW:
            near += 1
        else:
            far += 1
        if not all(row[c] for c in (0, 2, 3, 4, 5, 6, 7, 8)):
            emptied += 1
        if row[0]:
            assert row[0] != orig[0]
            names_differ += 1
        digits, orig_digits = re.sub(r"\D", "", row[3])[-9:], re.sub(r"\D", "", orig[3])[-9:]
        if valid_phone(row[3]) and valid_phone(orig[3]):
            assert digits != orig_digits
            phones_differ += 1
    assert near > 0.4 * data.stats.repeated_rows
    assert far > 0.3 * data.stats.repeated_rows
    assert emptied > 0.1 * data.stats.repeated_rows
    assert names_differ > 0.5 * data.stats.repeated_rows
    assert phones_differ > 0.5 * data.stats.repeated_rows


def test_preexisting_file_is_an_older_valid_subset(data: Generated) -> None:
    header, _ = _read_csv(data.pre)
    assert header == HEADER
    assert all(len(r) == 9 for r in data.pre_rows)
    first = _first_occurrences(data.rows)
    pre_keys = [normalize_key(r[1]) for r in data.pre_rows]
    assert len(pre_keys) == len(set(pre_keys)) == data.stats.preexisting_keys
    assert all(valid_key(k) for k in pre_keys)
    assert set(pre_keys) <= set(first)
    positions = sorted(first[k][0] for k in pre_keys)
    assert positions[0] < ROWS * 0.05
    assert positions[-1] > ROWS * 0.95
    for row, key in zip(data.pre_rows, pre_keys, strict=True):
        orig = first[key][1]
        assert row[0]
        assert row[0] != orig[0]
        assert "@" in row[2]
        assert valid_phone(row[3]), row[3]
        assert valid_phone(row[4]), row[4]
        if valid_phone(orig[3]):
            assert re.sub(r"\D", "", row[3])[-9:] != re.sub(r"\D", "", orig[3])[-9:]


def test_jsonl_holds_the_same_records(tmp_path: Path) -> None:
    gen.generate(3_000, 11, tmp_path / "a.csv")
    stats = gen.generate(3_000, 11, tmp_path / "a.jsonl", fmt="jsonl")
    _, csv_rows = _read_csv(tmp_path / "a.csv")
    lines = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == stats.rows == 3_000
    objects = [json.loads(line) for line in lines]
    assert all(list(o) == HEADER for o in objects)
    assert all(isinstance(v, str) for o in objects for v in o.values())
    assert [list(o.values()) for o in objects] == csv_rows


def test_cli_writes_files_and_meta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "c.csv"
    code = gen.main(
        [
            "--rows", "500", "--seed", "9", "--out", str(out),
            "--preexisting-out", str(tmp_path / "p.csv"), "--preexisting-ratio", "0.5",
        ]
    )  # fmt: skip
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    meta = json.loads((tmp_path / "sub" / "c.csv.meta.json").read_text(encoding="utf-8"))
    assert printed == meta
    assert meta["rows"] == 500
    assert 0.45 < meta["preexisting_keys"] / meta["distinct_keys"] < 0.55
    assert gen.main(["--rows", "-1", "--seed", "1", "--out", str(out)]) == 2


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rows"):
        gen.generate(-1, 1, tmp_path / "a.csv")
    with pytest.raises(ValueError, match="fmt"):
        gen.generate(1, 1, tmp_path / "a.csv", fmt="xml")
    with pytest.raises(ValueError, match="preexisting_ratio"):
        gen.generate(1, 1, tmp_path / "a.csv", preexisting_ratio=1.5)


def test_zero_rows_is_just_the_header(tmp_path: Path) -> None:
    stats = gen.generate(0, 1, tmp_path / "a.csv", preexisting_out=tmp_path / "p.csv")
    assert stats.rows == stats.distinct_keys == stats.preexisting_keys == 0
    assert (tmp_path / "a.csv").read_text(encoding="utf-8") == ",".join(HEADER) + "\n"


def test_phones_and_emails_agree_with_the_libraries(data: Generated) -> None:
    phonenumbers = pytest.importorskip("phonenumbers")
    email_validator = pytest.importorskip("email_validator")
    sample = data.rows[:3_000]
    for row in sample:
        phone = row[3]
        if not phone:
            continue
        try:
            ok = phonenumbers.is_valid_number(phonenumbers.parse(phone, "BR"))
        except phonenumbers.NumberParseException:
            ok = False
        assert ok == valid_phone(phone), phone
    for row in sample:
        email = row[2]
        if not email:
            continue
        try:
            email_validator.validate_email(email, check_deliverability=False)
            ok = True
        except email_validator.EmailNotValidError:
            ok = False
        assert ok == ("@" in email), email


def test_reading_back_through_a_text_stream(data: Generated) -> None:
    # the csv module in its usual setting (universal newlines off) sees the same records
    text = data.main.read_bytes().decode("utf-8")
    assert list(csv.reader(io.StringIO(text, newline="")))[1:] == data.rows

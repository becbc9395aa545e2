"""Key, phone and email normalization: vectors, and properties against the libraries.

The check digits here come from a separate, textbook implementation (``cpf_dv``,
``cnpj_dv``), and the phone/email references call only the libraries, so the fast paths
in ``importer.core.normalize`` are checked against something they do not share code with.
"""

from __future__ import annotations

import string

import phonenumbers
import pytest
from email_validator import EmailNotValidError, validate_email
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from importer.core import normalize
from importer.core.models import Phone, Reason
from importer.core.normalize import normalize_cpf_cnpj, normalize_email, normalize_phone

# --------------------------------------------------------------------------------------
# Independent check-digit implementations (Receita Federal's published algorithms)
# --------------------------------------------------------------------------------------


def cpf_dv(base9: str) -> str:
    """The two CPF check digits, the "multiply by 10, mod 11" way."""
    digits = [int(c) for c in base9]
    for _ in range(2):
        total = 0
        for position, digit in enumerate(digits):
            total += digit * (len(digits) + 1 - position)
        digits.append(total * 10 % 11 % 10)
    return f"{digits[-2]}{digits[-1]}"


def cnpj_dv(base12: str) -> str:
    """The two CNPJ check digits; letters are worth ``ord(c) - 48`` (alphanumeric CNPJ)."""
    values = [ord(c) - ord("0") for c in base12.upper()]
    for weights in ([5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2], [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]):
        remainder = sum(v * w for v, w in zip(values, weights, strict=True)) % 11
        values.append(0 if remainder < 2 else 11 - remainder)
    return f"{values[-2]}{values[-1]}"


def format_cpf(key: str) -> str:
    return f"{key[:3]}.{key[3:6]}.{key[6:9]}-{key[9:]}"


def format_cnpj(key: str) -> str:
    return f"{key[:2]}.{key[2:5]}.{key[5:8]}/{key[8:12]}-{key[12:]}"


def test_reference_implementations_match_published_examples() -> None:
    assert cpf_dv("529982247") == "25"
    assert cpf_dv("111444777") == "35"
    assert cnpj_dv("112223330001") == "81"
    assert cnpj_dv("114447770001") == "61"
    assert cnpj_dv("12ABC34501DE") == "35"  # Receita Federal's alphanumeric example


# --------------------------------------------------------------------------------------
# CPF / CNPJ vectors
# --------------------------------------------------------------------------------------

LEADING_ZERO_CPF = "012345678" + cpf_dv("012345678")  # 01234567890
TWO_ZEROS_CPF = "001234567" + cpf_dv("001234567")
LEADING_ZERO_CNPJ = "012223330001" + cnpj_dv("012223330001")
TWO_ZEROS_CNPJ = "001222333000" + cnpj_dv("001222333000")
ALNUM_CNPJ = "12ABC34501DE" + cnpj_dv("12ABC34501DE")
ALNUM_CNPJ_2 = "A1B2C3D4E5F6" + cnpj_dv("A1B2C3D4E5F6")
ALNUM_CNPJ_3 = "00ZZ00000001" + cnpj_dv("00ZZ00000001")  # leading zeros: never dropped
FULLWIDTH_CPF = "52998224725".translate({ord(d): ord(d) + 0xFEE0 for d in string.digits})
ARABIC_INDIC_CPF = "52998224725".translate({ord(d): ord(d) + 0x0630 for d in string.digits})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("529.982.247-25", "52998224725"),
        ("52998224725", "52998224725"),
        ("111.444.777-35", "11144477735"),
        ("  529 982 247 25  ", "52998224725"),
        ("529\u00a0982\u00a0247\t25\n", "52998224725"),  # NBSP, tab, newline
        ("529/982/247.25", "52998224725"),
        (LEADING_ZERO_CPF[1:], LEADING_ZERO_CPF),  # 1234567890 → 01234567890
        (format_cpf(LEADING_ZERO_CPF)[1:], LEADING_ZERO_CPF),  # 12.345.678-90 style
        (TWO_ZEROS_CPF.lstrip("0"), TWO_ZEROS_CPF),
        ("191", "00000000191"),  # 000.000.001-91 typed as a number
        ("11.222.333/0001-81", "11222333000181"),
        ("11222333000181", "11222333000181"),
        ("11.444.777/0001-61", "11444777000161"),
        (LEADING_ZERO_CNPJ[1:], LEADING_ZERO_CNPJ),  # 13 digits → 14
        (TWO_ZEROS_CNPJ[2:], TWO_ZEROS_CNPJ),  # 12 digits → 14
        ("12.ABC.345/01DE-35", "12ABC34501DE35"),
        ("12abc34501de35", "12ABC34501DE35"),  # lowercase input is uppercased
        ("12.abc.345/01De-35", "12ABC34501DE35"),
        (ALNUM_CNPJ, ALNUM_CNPJ),
        (format_cnpj(ALNUM_CNPJ_2).lower(), ALNUM_CNPJ_2),
        (ALNUM_CNPJ_3, ALNUM_CNPJ_3),
    ],
)
def test_valid_keys(raw: str, expected: str) -> None:
    assert normalize_cpf_cnpj(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", Reason.MISSING_CPF_CNPJ),
        ("   ", Reason.MISSING_CPF_CNPJ),
        (".-/", Reason.MISSING_CPF_CNPJ),
        (" . - / \u00a0", Reason.MISSING_CPF_CNPJ),
        # wrong check digits
        ("529.982.247-24", Reason.INVALID_CPF),
        ("529.982.247-35", Reason.INVALID_CPF),
        ("111.444.777-53", Reason.INVALID_CPF),
        ("11.222.333/0001-82", Reason.INVALID_CNPJ),
        ("11.444.777/0001-16", Reason.INVALID_CNPJ),
        ("12.ABC.345/01DE-36", Reason.INVALID_CNPJ),
        ("12ABC34501DF35", Reason.INVALID_CNPJ),
        # repeated characters (their check digits are consistent, the rule rejects them)
        ("000.000.000-00", Reason.INVALID_CPF),
        ("111.111.111-11", Reason.INVALID_CPF),
        ("99999999999", Reason.INVALID_CPF),
        ("0", Reason.INVALID_CPF),  # padded to 00000000000
        ("00000000000000", Reason.INVALID_CNPJ),
        ("11.111.111/1111-11", Reason.INVALID_CNPJ),
        ("000000000000", Reason.INVALID_CNPJ),  # 12 zeros padded to 14
        # letters where they cannot be
        ("12ABC34501DE3A", Reason.INVALID_CPF_CNPJ_FORMAT),  # letter in a check digit
        ("12ABC34501DEAB", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("1234567890A", Reason.INVALID_CPF_CNPJ_FORMAT),  # 11 characters: a CPF
        ("529.982.247-2X", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("12ABC34501DE", Reason.INVALID_CPF_CNPJ_FORMAT),  # 12 alphanumeric: no padding
        ("2ABC34501DE35", Reason.INVALID_CPF_CNPJ_FORMAT),  # 13 alphanumeric
        ("ABC", Reason.INVALID_CPF_CNPJ_FORMAT),
        # too long
        ("123456789012345", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("11.222.333/0001-810", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("52998224725 52998224725", Reason.INVALID_CPF_CNPJ_FORMAT),
        # other characters
        ("529,982,247-25", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("529_982_247_25", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("529.982.247-25;", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("cpf: 52998224725", Reason.INVALID_CPF_CNPJ_FORMAT),
        # Excel mangling: scientific notation lost digits ("," and "+" are not formatting)
        ("1,23457E+10", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("1.23457E+10", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("5,29982E+10", Reason.INVALID_CPF_CNPJ_FORMAT),
        ("1.23457E10", Reason.INVALID_CPF_CNPJ_FORMAT),  # "123457E10": a letter, 9 chars
        # Excel text formula: not unwrapped, '=' and '"' are not formatting characters
        ('="01234567890"', Reason.INVALID_CPF_CNPJ_FORMAT),
        ("'01234567890", Reason.INVALID_CPF_CNPJ_FORMAT),
        # non-ASCII look-alikes (checked before upper(): "ﬀ".upper() == "FF")
        (FULLWIDTH_CPF, Reason.INVALID_CPF_CNPJ_FORMAT),
        (ARABIC_INDIC_CPF, Reason.INVALID_CPF_CNPJ_FORMAT),
        ("12\ufb00C34501DE35", Reason.INVALID_CPF_CNPJ_FORMAT),  # the "ff" ligature
        ("12\u0131BC34501DE35", Reason.INVALID_CPF_CNPJ_FORMAT),  # dotless i uppercases to I
        ("529.982.247-2\u200b5", Reason.INVALID_CPF_CNPJ_FORMAT),  # zero width space
    ],
)
def test_invalid_keys(raw: str, reason: Reason) -> None:
    assert normalize_cpf_cnpj(raw) == reason


def test_repeated_sequences_have_consistent_check_digits() -> None:
    """So the repeated-character rule, not the arithmetic, is what rejects them."""
    assert cpf_dv("111111111") == "11"
    assert cpf_dv("000000000") == "00"
    assert cnpj_dv("000000000000") == "00"


# --------------------------------------------------------------------------------------
# CPF / CNPJ properties
# --------------------------------------------------------------------------------------

FORMATTING = st.sampled_from([".", "-", "/", " ", "\t", "\u00a0", "\n"])
KEY_CHARS = string.digits * 4 + string.ascii_uppercase + string.ascii_lowercase + ".-/ ,+E"
key_like = st.text(alphabet=KEY_CHARS, max_size=18)


@st.composite
def valid_keys(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["cpf", "cnpj", "alnum"]))
    if kind == "cpf":
        base = draw(st.text(string.digits, min_size=9, max_size=9))
        return base + cpf_dv(base)
    alphabet = string.digits if kind == "cnpj" else string.digits + string.ascii_uppercase
    base = draw(st.text(alphabet, min_size=12, max_size=12))
    return base + cnpj_dv(base)


@st.composite
def with_formatting(draw: st.DrawFn, text: str) -> str:
    chars = list(text)
    for _ in range(draw(st.integers(0, 6))):
        chars.insert(draw(st.integers(0, len(chars))), draw(FORMATTING))
    return "".join(chars)


@given(st.one_of(key_like, valid_keys(), st.text(max_size=16)))
def test_key_normalization_is_idempotent(raw: str) -> None:
    result = normalize_cpf_cnpj(raw)
    if not isinstance(result, Reason):
        assert normalize_cpf_cnpj(result) == result


@given(st.one_of(key_like, valid_keys(), st.text(max_size=16)))
def test_valid_key_shape(raw: str) -> None:
    result = normalize_cpf_cnpj(raw)
    if not isinstance(result, Reason):
        assert len(result) in (11, 14)
        assert result.isascii()
        assert result.isalnum()
        assert result == result.upper()
        assert result[-2:].isdigit()
        assert len(result) == 14 or result.isdigit()


@given(
    st.one_of(key_like, valid_keys()).flatmap(
        lambda key: st.tuples(st.just(key), with_formatting(key))
    )
)
def test_formatting_characters_do_not_change_the_result(pair: tuple[str, str]) -> None:
    key, formatted = pair
    assert normalize_cpf_cnpj(formatted) == normalize_cpf_cnpj(key)


@given(valid_keys())
def test_generated_valid_keys_are_accepted_unless_repeated(key: str) -> None:
    expected = Reason.INVALID_CPF if len(key) == 11 else Reason.INVALID_CNPJ
    repeated = len(set(key)) == 1
    assert normalize_cpf_cnpj(key) == (expected if repeated else key)
    assert normalize_cpf_cnpj(key.lower()) == normalize_cpf_cnpj(key)


@given(valid_keys(), st.integers(1, 9))
def test_a_wrong_check_digit_is_rejected(key: str, delta: int) -> None:
    wrong = key[:-1] + str((int(key[-1]) + delta) % 10)
    expected = Reason.INVALID_CPF if len(key) == 11 else Reason.INVALID_CNPJ
    assert normalize_cpf_cnpj(wrong) == expected


@given(st.text(string.digits, min_size=1, max_size=14))
def test_numeric_keys_agree_with_the_reference(digits: str) -> None:
    padded = digits.zfill(11) if len(digits) <= 11 else digits.zfill(14)
    dv = cpf_dv(padded[:9]) if len(padded) == 11 else cnpj_dv(padded[:12])
    ok = padded.endswith(dv) and len(set(padded)) > 1
    expected: str | Reason = padded
    if not ok:
        expected = Reason.INVALID_CPF if len(padded) == 11 else Reason.INVALID_CNPJ
    assert normalize_cpf_cnpj(digits) == expected


# --------------------------------------------------------------------------------------
# Phones
# --------------------------------------------------------------------------------------


def reference_phone(raw: str, *, international: bool = False) -> Phone | None:
    """The slow path: phonenumbers only (plus the 64-character guard)."""
    if len(raw) > 64:
        return None
    try:
        number = phonenumbers.parse(raw, None if international else "BR")
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number):
        return None
    return Phone(
        phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164),
        number.country_code or 0,
        phonenumbers.region_code_for_number(number),
    )


SP_MOBILE = Phone("+5511912345678", 55, "BR")


@pytest.mark.parametrize(
    "raw",
    [
        "(11) 91234-5678",
        "(11)91234-5678",
        "11 91234-5678",
        "11 9 1234-5678",
        "11912345678",
        "11.91234.5678",
        "+55 11 91234-5678",
        "+55 (11) 91234-5678",
        "+5511912345678",
        "(+55) 11 91234 5678",
        "5511912345678",
        "55 11 91234 5678",
        "011 91234 5678",
        "(011) 91234-5678",
        "0 21 11 91234-5678",  # carrier selection code 21
        " (11) 91234-5678 ",
        "++55 11 91234-5678",  # phonenumbers allows several plus signs
    ],
)
def test_br_mobile_formats(raw: str) -> None:
    assert normalize_phone(raw) == SP_MOBILE
    assert normalize_phone(raw) == reference_phone(raw)


@pytest.mark.parametrize(
    ("raw", "e164"),
    [
        ("(21) 2345-6789", "+552123456789"),  # landline
        ("21 3456 7890", "+552134567890"),
        ("+55 61 3411-1221", "+556134111221"),
        ("(98) 98765-4321", "+5598987654321"),
        ("(11) 7123-4567", "+551171234567"),  # old 8-digit mobile range
        ("4004-1234", "+5540041234"),  # shared cost, no area code
        ("0800 123 4567", "+558001234567"),  # toll free
        ("0300 123 4567", "+553001234567"),
        ("+55 0800 123 4567", "+558001234567"),
        ("55 2123 4567", "+555521234567"),  # DDD 55 landline: 55 is not the country code
        ("(11) 9ABCD-5678", "+5511922235678"),  # phonenumbers reads vanity letters
    ],
)
def test_other_valid_br_numbers(raw: str, e164: str) -> None:
    assert normalize_phone(raw) == Phone(e164, 55, "BR")
    assert normalize_phone(raw) == reference_phone(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "(20) 91234-5678",  # no DDD 20
        "(10) 91234-5678",
        "(11) 9123-456",  # digits missing
        "(11) 91234-56789",
        "12345",
        "0000-0000",
        "9999999",
        "não tem",
        "sem celular",
        "abc",
        "11 91234-5678 ramal 2",
        "11+91234-5678",
        "0055 11 91234 5678",  # 00 without a carrier code is not an IDD in BR
        "1 650 253 0000",  # US number without "+": read as Brazilian
        "+999 1234 5678",
        "+",
        "+55",
    ],
)
def test_invalid_phones(raw: str) -> None:
    assert normalize_phone(raw) is None
    assert reference_phone(raw) is None


def test_international_numbers() -> None:
    us = Phone("+16502530000", 1, "US")
    assert normalize_phone("+1 650 253 0000") == us
    assert normalize_phone("+1 650 253 0000", international=True) == us
    assert normalize_phone("+44 20 7946 0958", international=True) == Phone(
        "+442079460958", 44, "GB"
    )
    assert normalize_phone("0014 1 650 253 0000") == us  # BR IDD with carrier code 14
    assert normalize_phone("+55 11 91234-5678", international=True) == SP_MOBILE


@pytest.mark.parametrize(
    "raw", ["(11) 91234-5678", "11912345678", "5511912345678", "1 650 253 0000"]
)
def test_international_requires_the_country_code(raw: str) -> None:
    assert normalize_phone(raw, international=True) is None


def test_raw_phone_over_64_characters_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: object, **__: object) -> None:
        raise AssertionError("parsed")

    monkeypatch.setattr(phonenumbers, "parse", boom)
    assert normalize_phone("(11) 91234-5678".ljust(65)) is None
    assert normalize_phone("x" * 65) is None


@pytest.mark.parametrize(
    "raw",
    [
        "(11) 91234-5678",
        "11912345678",
        "+55 11 91234-5678",
        "5511912345678",
        "011 91234 5678",
        "(21) 2345-6789",
        "(20) 91234-5678",
        "(11) 9123-456",
        "0800 123 4567",
    ],
)
def test_common_shapes_take_the_fast_path(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = reference_phone(raw)

    def slow(*_: object, **__: object) -> None:
        raise AssertionError("slow path")

    monkeypatch.setattr(normalize, "_library_phone", slow)
    assert normalize_phone(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["(11) 91234-5678", "11 91234-5678", "11912345678", "+55 11 91234-5678", "(21) 2345-6789"],
)
def test_usual_shapes_take_the_single_regex_path(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = reference_phone(raw)

    def general(*_: object, **__: object) -> None:
        raise AssertionError("general path")

    monkeypatch.setattr(normalize, "_fast_national_number", general)
    assert normalize_phone(raw) == expected
    assert normalize.normalize_phone_parts(raw) == (
        (expected.e164, expected.country_code, expected.country) if expected else None
    )


# Area codes: real ones, and a few that do not exist.
DDDS = ["11", "12", "19", "21", "27", "31", "38", "41", "47", "51", "55", "61", "71", "79"]
DDDS += ["81", "85", "91", "98", "99", "10", "20", "23", "30", "52", "56", "90"]
PREFIXES = ["", "", "", "+55", "+55 ", "55", "55 ", "0", "0 ", "0 21 ", "015", "014 ", "90"]
PREFIXES += ["550", "55 0", "5590", "+55 0", "+55 90", "00", "0014 ", "0055", "+1 ", "+", "9015"]


# (first digits, digits that follow) of the national numbers BR has: mobile, landline,
# old mobile range, no area code (4004-xxxx, 0800 xxx xxxx, ...) and nonsense.
NATIONAL_SHAPES = [("9", 8), ("9", 8), ("2", 7), ("3", 7), ("4", 7), ("5", 7), ("7", 7)]
NATIONAL_SHAPES += [("8", 7), ("1", 7), ("6", 8), ("0", 8)]
NO_AREA_CODE = [("4004", 4), ("4003", 4), ("4020", 4), ("3003", 4), ("800", 7), ("300", 6)]
NO_AREA_CODE += [("500", 7), ("900", 7), ("800", 6)]


@st.composite
def br_shaped_phones(draw: st.DrawFn) -> str:
    """A Brazilian-looking number, maybe with a prefix, maybe a digit short or long."""
    prefix = draw(st.sampled_from(PREFIXES))
    if draw(st.integers(0, 9)) == 0:
        head, size = draw(st.sampled_from(NO_AREA_CODE))
    else:
        first, size = draw(st.sampled_from(NATIONAL_SHAPES))
        head = draw(st.sampled_from(DDDS)) + first
    size += draw(st.sampled_from([0, 0, 0, 0, 0, -1, 1]))
    tail = draw(st.text(string.digits, min_size=size, max_size=size))
    chars = list(prefix + head + tail)
    for _ in range(draw(st.integers(0, 5))):
        chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(" ()-.")))
    return "".join(chars)


phone_like = st.one_of(
    br_shaped_phones(),
    st.one_of(
        st.text(alphabet="0123456789 ()-.+", max_size=20),
        st.text(alphabet=string.digits, min_size=8, max_size=14),
        st.text(alphabet="0123456789 ()-.+xX#,;/ABCabc\u00a0\uff0b\uff11", max_size=20),
        st.text(max_size=12),
    ),
)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(phone_like, st.booleans())
@example("(11) 91234-5678", False)
@example("+55 11 91234-5678", True)
@example("55 11 91234 5678", False)
@example("5590 11 91234 5678", False)
@example("+55 0 21 11 91234-5678", False)
def test_phone_fast_path_equals_the_library(raw: str, international: bool) -> None:
    assert normalize_phone(raw, international=international) == reference_phone(
        raw, international=international
    )


# --------------------------------------------------------------------------------------
# Emails
# --------------------------------------------------------------------------------------


def reference_email(raw: str) -> str | None:
    """The slow path: email_validator, without DNS, keeping the local part as given."""
    address = raw.strip()
    try:
        email = validate_email(address, check_deliverability=False)
    except EmailNotValidError:
        return None
    return f"{address.rpartition('@')[0]}@{email.domain}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("maria.silva@example.com", "maria.silva@example.com"),
        ("Maria.Silva@Example.COM.BR", "Maria.Silva@example.com.br"),  # domain only
        ("  joao@empresa.com.br \t", "joao@empresa.com.br"),
        ("user+tag@sub.domain.org", "user+tag@sub.domain.org"),
        ("o'brien@example.ie", "o'brien@example.ie"),
        ("a@b.co", "a@b.co"),
        ("x@my-host.example", "x@my-host.example"),
        ("Info@Example.com", "Info@example.com"),  # the library would lowercase "info"
        ("user@Bücher.de", "user@bücher.de"),  # IDN through the library
        ("user@xn--bcher-kva.de", "user@bücher.de"),  # Punycode shown in Unicode
        ("josé@exemplo.com.br", "josé@exemplo.com.br"),  # internationalized local part
    ],
)
def test_valid_emails(raw: str, expected: str) -> None:
    assert normalize_email(raw) == expected
    assert reference_email(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "maria.example.com",  # missing @
        "a@b@example.com",  # two @
        "a@example.com.",  # trailing dot
        "a@.example.com",
        "a@example..com",
        ".a@example.com",
        "a.@example.com",
        "a..b@example.com",
        "a b@example.com",  # space inside
        "a@exa mple.com",
        "@example.com",
        "a@",
        "a@localhost",
        "a@example",  # no period
        "a@example.123",  # numeric TLD
        "a@-example.com",
        "a@example-.com",
        "a@ab--c.com",  # R-LDH label
        "a@xn--zz.com",  # invalid Punycode
        "a@host.test",  # special-use names
        "a@printer.local",
        "a@x.onion",
        '"a b"@example.com',  # quoted local part
        "Maria <maria@example.com>",  # display name
        "a@[127.0.0.1]",  # domain literal
        "não tem",
    ],
)
def test_invalid_emails(raw: str) -> None:
    assert normalize_email(raw) is None
    assert reference_email(raw) is None


@pytest.mark.parametrize(
    "raw",
    ["maria.silva@example.com", "Maria.Silva@Example.COM.BR", "a@host.test", "joao+1@gmail.com"],
)
def test_plain_ascii_emails_take_the_fast_path(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = reference_email(raw)

    def slow(*_: object, **__: object) -> None:
        raise AssertionError("slow path")

    monkeypatch.setattr(normalize, "_library_email", slow)
    assert normalize_email(raw) == expected


LOCAL_CHARS = string.ascii_letters + string.digits + ".+-_!#'=" + '"@ <>\\,é'
DOMAIN_CHARS = string.ascii_letters + string.digits + "-." + "éü_"


@st.composite
def email_like(draw: st.DrawFn) -> str:
    local = draw(st.text(LOCAL_CHARS, min_size=0, max_size=draw(st.sampled_from([8, 70]))))
    labels = draw(
        st.lists(
            st.text(DOMAIN_CHARS, min_size=0, max_size=draw(st.sampled_from([6, 66]))), max_size=4
        )
    )
    tld = draw(
        st.sampled_from(
            ["com", "COM", "br", "Br", "c", "test", "local", "arpa", "x1", "123", "xn--p1ai", ""]
        )
    )
    space = draw(st.sampled_from(["", "", " ", "\t"]))
    return f"{space}{local}@{'.'.join([*labels, tld])}{space}"


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(email_like(), st.text(max_size=30)))
@example("Foo.Bar@Example.COM")
@example("SALES@example.com")
@example("a" * 64 + "@example.com")  # the longest local part
@example("a" * 65 + "@example.com")
@example("x@" + "a" * 63 + ".com")  # the longest label
@example("x@" + "a" * 64 + ".com")
@example("x@" + "a" * 60 + "." + "b" * 60 + ".com")  # long domain, short labels
@example("x@a--b.example.com")  # "--" outside the R-LDH places
@example("x@ab--c.example.com")
def test_email_fast_path_acceptance_implies_the_library_agrees(raw: str) -> None:
    address = raw.strip()
    fast = normalize._fast_email(address)
    result = normalize_email(raw)
    assert result == reference_email(raw)
    if fast is None or result is None:
        return  # not fast-accepted, or a special-use name the fast path rejects itself
    local, domain = fast.groups()
    email = validate_email(address, check_deliverability=False)
    assert result == f"{local}@{domain.lower()}"
    assert email.domain == email.ascii_domain == domain.lower()
    # The only other difference from .normalized: RFC 2142 role names are lowercased.
    role = local.lower() in CASE_INSENSITIVE_MAILBOX_NAMES
    assert email.local_part == (local.lower() if role else local)

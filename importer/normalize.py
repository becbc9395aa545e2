"""Key, phone and email normalization (SPEC "Validation and normalization").

Pure functions, no I/O. Phones and emails run on every row, so each has a fast path
for the common shapes, checked against the library path by property tests in
``tests/unit/test_normalize.py``; everything else goes to the library.
"""

from __future__ import annotations

import re
from operator import mul
from typing import Final

import phonenumbers
from email_validator import (
    SPECIAL_USE_DOMAIN_NAMES,
    EmailNotValidError,
    validate_email,
)
from phonenumbers import PhoneMetadata, PhoneNumberDesc

from importer.models import Phone, Reason

__all__ = ["normalize_cpf_cnpj", "normalize_email", "normalize_phone"]

# ---------------------------------------------------------------------------
# CPF / CNPJ key
# ---------------------------------------------------------------------------

CPF_LENGTH: Final = 11
CNPJ_LENGTH: Final = 14
_CNPJ_BASE_LENGTH: Final = 12  # the places where an alphanumeric CNPJ may have letters
_ASCII_ZERO: Final = ord("0")  # a character's value is its ASCII code minus this
# Per check digit: the weights, and the sum that the ASCII codes add (ASCII_ZERO * weights).
_CheckRule = tuple[tuple[int, ...], int]


def _rules(*weights: tuple[int, ...]) -> tuple[_CheckRule, _CheckRule]:
    first, second = ((row, _ASCII_ZERO * sum(row)) for row in weights)
    return first, second


_CPF_RULES: Final = _rules((10, 9, 8, 7, 6, 5, 4, 3, 2), (11, 10, 9, 8, 7, 6, 5, 4, 3, 2))
_CNPJ_RULES: Final = _rules(
    (5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2),
    (6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2),
)


def normalize_cpf_cnpj(raw: str) -> str | Reason:
    """Return the normalized key, or the Reason why it is invalid.

    Excel leftovers are format errors, not keys: scientific notation (``1,23457E+10``,
    digits lost) and text formulas (``="01234567890"``) carry ``, + = "``.
    """
    key = _compact_key(raw)
    if not key:
        return Reason.MISSING_CPF_CNPJ
    # isascii before upper(): "ﬀ".upper() == "FF" would smuggle letters in.
    if not (key.isascii() and key.isalnum()) or len(key) > CNPJ_LENGTH:
        return Reason.INVALID_CPF_CNPJ_FORMAT
    key = _pad_numeric(key.upper())
    if len(key) == CPF_LENGTH and key.isdigit():
        valid, reason = _has_valid_check_digits(key, _CPF_RULES), Reason.INVALID_CPF
    elif len(key) == CNPJ_LENGTH and key[_CNPJ_BASE_LENGTH:].isdigit():
        valid, reason = _has_valid_check_digits(key, _CNPJ_RULES), Reason.INVALID_CNPJ
    else:
        return Reason.INVALID_CPF_CNPJ_FORMAT
    return key if valid else reason


def _compact_key(raw: str) -> str:
    """Drop ``.``, ``-``, ``/`` and every (Unicode) whitespace character."""
    key = raw.replace(".", "").replace("-", "").replace("/", "")
    return key if key.isalnum() else "".join(key.split())


def _pad_numeric(key: str) -> str:
    """Restore the leading zeros a spreadsheet dropped from an all-numeric key."""
    if not key.isdigit():
        return key
    if len(key) < CPF_LENGTH:
        return key.zfill(CPF_LENGTH)
    if CPF_LENGTH < len(key) < CNPJ_LENGTH:
        return key.zfill(CNPJ_LENGTH)
    return key


def _has_valid_check_digits(key: str, rules: tuple[_CheckRule, _CheckRule]) -> bool:
    """Mod-11 check digits of a CPF or a (possibly alphanumeric) CNPJ; no repeats."""
    if key.count(key[0]) == len(key):
        return False
    codes = key.encode("ascii")
    first, second = rules
    return (
        _check_digit(codes, first) == codes[-2] - _ASCII_ZERO
        and _check_digit(codes, second) == codes[-1] - _ASCII_ZERO
    )


def _check_digit(codes: bytes, rule: _CheckRule) -> int:
    """11 minus the weighted sum's remainder mod 11; 10 and 11 become 0."""
    weights, ascii_bias = rule
    total: int = sum(map(mul, codes, weights)) - ascii_bias
    return -total % 11 % 10


# ---------------------------------------------------------------------------
# Phones
# ---------------------------------------------------------------------------

PHONE_MAX_RAW_LENGTH: Final = 64  # longer raw values are not phones: None, unparsed
_DEFAULT_REGION: Final = "BR"
_PHONE_PUNCTUATION: Final = " ().-"  # what the fast path accepts besides digits and one "+"


class _RegionRules:
    """The parts of a region's phonenumbers metadata that the fast path replays."""

    __slots__ = (
        "country_code",
        "country_prefix",
        "general",
        "idd",
        "lengths",
        "local_only_lengths",
        "max_length",
        "national_prefix",
        "prefix_transform",
        "valid_by_length",
    )

    def __init__(self, region: str) -> None:
        meta = PhoneMetadata.metadata_for_region(region)
        general = meta.general_desc if meta else None
        if meta is None or meta.country_code is None or general is None:
            msg = f"phonenumbers has no metadata for {region}"
            raise RuntimeError(msg)
        self.country_code = meta.country_code
        self.country_prefix = str(meta.country_code)
        self.general = re.compile(general.national_number_pattern or "(?!)")
        self.lengths = general.possible_length
        self.max_length = max(general.possible_length)
        self.local_only_lengths = general.possible_length_local_only
        self.national_prefix = re.compile(meta.national_prefix_for_parsing or "(?!)")
        self.prefix_transform = meta.national_prefix_transform_rule
        self.idd = re.compile(meta.international_prefix or "(?!)")
        self.valid_by_length = _validity_patterns(meta, general)

    def too_long(self, digits: str) -> bool:
        """``_test_number_length(digits) == TOO_LONG``."""
        n = len(digits)
        return n not in self.local_only_lengths and n > self.max_length

    def without_national_prefix(self, national: str) -> str:
        """``parse``: strip the prefix unless what is left has an impossible length."""
        if self.national_prefix.match(national) is None:
            return national
        stripped = self.strip_national_prefix(national)
        n = len(stripped)
        if n in self.lengths or self.too_long(stripped):
            return stripped
        return national

    def strip_national_prefix(self, number: str) -> str:
        """``_maybe_strip_national_prefix_carrier_code``: the number without it."""
        found = self.national_prefix.match(number)
        if found is None:
            return number
        groups = found.re.groups
        if self.prefix_transform and groups and found.group(groups) is not None:
            stripped = self.national_prefix.sub(self.prefix_transform, number, count=1)
        else:
            stripped = number[found.end() :]
        if self.general.fullmatch(number) and not self.general.fullmatch(stripped):
            return number
        return stripped


def _validity_patterns(meta: PhoneMetadata, general: PhoneNumberDesc) -> dict[int, re.Pattern[str]]:
    """Per NSN length: matches exactly what ``is_valid_number`` accepts for the region.

    ``is_valid_number`` wants the general pattern and any number type's pattern, each
    gated by its possible lengths; this folds that into one regex per length.
    """
    types = _valid_number_types(meta)
    patterns: dict[int, re.Pattern[str]] = {}
    for length in general.possible_length or range(2, 18):
        alternatives = [
            f"(?:{desc.national_number_pattern})"
            for desc in types
            if not desc.possible_length or length in desc.possible_length
        ]
        if alternatives and general.national_number_pattern:
            patterns[length] = re.compile(
                rf"(?=(?:{general.national_number_pattern})\Z)(?:{'|'.join(alternatives)})"
            )
    return patterns


def _valid_number_types(meta: PhoneMetadata) -> list[PhoneNumberDesc]:
    """List the descs ``_number_type_helper`` checks, in its order."""
    descs = [
        meta.premium_rate,
        meta.toll_free,
        meta.shared_cost,
        meta.voip,
        meta.personal_number,
        meta.pager,
        meta.uan,
        meta.voicemail,
        meta.fixed_line,
    ]
    if not meta.same_mobile_and_fixed_line_pattern:
        descs.append(meta.mobile)
    return [d for d in descs if d is not None and d.national_number_pattern]


_BR: Final = _RegionRules(_DEFAULT_REGION)
_BR_COUNTRY: Final = phonenumbers.region_code_for_country_code(_BR.country_code)
_BR_E164_PREFIX: Final = f"+{_BR.country_prefix}"


def normalize_phone(raw: str, *, international: bool = False) -> Phone | None:
    """E.164 phone or None when not a valid number.

    Default region BR unless ``international`` (then the number must carry its
    +country code). Same result as ``phonenumbers.parse`` + ``is_valid_number``.
    """
    if len(raw) > PHONE_MAX_RAW_LENGTH:
        return None
    national = _fast_national_number(raw, international=international)
    if national is None:
        return _library_phone(raw, international=international)
    return _br_phone(national)


def _fast_national_number(raw: str, *, international: bool) -> str | None:
    """Build the BR national number as ``parse`` would; None: ask the library.

    Replays ``parse`` for input made of digits and ``( ) - .`` spaces with at most
    one leading ``+``: the country code (``+55``, or a ``55`` that ``parse`` takes
    as one) and a national/carrier prefix are removed; an IDD or another country
    code goes to the library.
    """
    digits = _phone_digits(raw)
    if not (digits.isdigit() and digits.isascii()):
        return None  # letters, other punctuation, no digits at all
    if "+" in raw:
        if raw.count("+") > 1 or raw.lstrip(_PHONE_PUNCTUATION)[0] != "+":
            return None  # a "+" that is not the number's first character
        if not digits.startswith(_BR.country_prefix):
            return None  # another country: the library knows them all
        national = digits[len(_BR.country_prefix) :]
    elif international:
        return ""  # no "+country code": invalid, as parse(raw, None) says
    elif _BR.idd.match(digits):
        return None
    elif digits.startswith(_BR.country_prefix):
        national = _without_default_country_code(digits)
    else:
        national = digits
    return _BR.without_national_prefix(national)


def _phone_digits(raw: str) -> str:
    """Drop the fast shape's punctuation (three times faster than ``str.translate``)."""
    return (
        raw.replace(" ", "")
        .replace("-", "")
        .replace("(", "")
        .replace(")", "")
        .replace(".", "")
        .replace("+", "")
    )


def _without_default_country_code(digits: str) -> str:
    """``_maybe_extract_country_code`` for digits starting with 55 but no plus sign."""
    rest = _BR.strip_national_prefix(digits[len(_BR.country_prefix) :])
    if _BR.too_long(digits) or (not _BR.general.fullmatch(digits) and _BR.general.fullmatch(rest)):
        return rest
    return digits


def _br_phone(national: str) -> Phone | None:
    pattern = _BR.valid_by_length.get(len(national))
    if pattern is None or pattern.fullmatch(national) is None:
        return None
    return Phone(_BR_E164_PREFIX + national, _BR.country_code, _BR_COUNTRY)


def _library_phone(raw: str, *, international: bool) -> Phone | None:
    region = None if international else _DEFAULT_REGION
    try:
        number = phonenumbers.parse(raw, region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number):
        return None
    e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    country_code = number.country_code or 0  # always set on a valid number
    return Phone(e164, country_code, phonenumbers.region_code_for_number(number))


# ---------------------------------------------------------------------------
# Emails
# ---------------------------------------------------------------------------

EMAIL_MAX_LENGTH: Final = 254
_ATEXT: Final = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_LDH_LABEL: Final = (
    r"(?![A-Za-z0-9-]{2}--)"  # R-LDH / Punycode labels: the library decides
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
)
# Plain ASCII only: dot-atom local part <= 64, >= 2 LDH labels, alphabetic TLD.
_EMAIL_FAST: Final = re.compile(
    rf"(?=[^@]{{1,64}}@)([{_ATEXT}]+(?:\.[{_ATEXT}]+)*)"
    rf"@((?:{_LDH_LABEL}\.)+[A-Za-z]{{1,63}})"
)
_SPECIAL_USE_SUFFIXES: Final = tuple(f".{name}" for name in SPECIAL_USE_DOMAIN_NAMES)


def normalize_email(raw: str) -> str | None:
    """Syntax-checked email with the domain lowercased (local part kept), or None.

    No DNS. Surrounding whitespace is trimmed first.
    """
    address = raw.strip()
    fast = _EMAIL_FAST.fullmatch(address) if len(address) <= EMAIL_MAX_LENGTH else None
    if fast is None:
        return _library_email(address)
    domain = fast.group(2).lower()
    if f".{domain}".endswith(_SPECIAL_USE_SUFFIXES):
        return None  # .test, .local, ...: email_validator rejects them too
    return f"{fast.group(1)}@{domain}"


def _library_email(address: str) -> str | None:
    """``validate_email`` without DNS, keeping the local part exactly as given.

    Differences from ``ValidatedEmail.normalized``: its local part is NFC-normalized
    and lowercased for RFC 2142 role names (``Info@``, ``SALES@``); ours is the input's.
    Its domain is UTS-46 case-folded and shown in Unicode (``xn--bcher-kva.de`` comes
    back as ``bücher.de``): we keep that.
    """
    if not address:
        return None
    try:
        email = validate_email(address, check_deliverability=False)
    except EmailNotValidError:
        return None
    local_part = email.original.rpartition("@")[0]
    return f"{local_part}@{email.domain}"

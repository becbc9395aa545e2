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

from importer.core.models import Phone, Reason

__all__ = [
    "PhoneParts",
    "normalize_cpf_cnpj",
    "normalize_email",
    "normalize_phone",
    "normalize_phone_parts",
]

# ---------------------------------------------------------------------------
# CPF / CNPJ key
# ---------------------------------------------------------------------------

CPF_LENGTH: Final = 11
CNPJ_LENGTH: Final = 14
_CNPJ_BASE_LENGTH: Final = 12  # the places where an alphanumeric CNPJ may have letters
_ASCII_ZERO: Final = ord("0")  # a character's value is its ASCII code minus this
_KEY_FORMATTING: Final = b".-/ "  # what the fast path drops from an ASCII key
# Both check digits' weighted sums come from one ``sum(map(mul, codes, weights))``: the
# second digit's weights are shifted left by _SUM_BITS, so its sum lands above the first's
# (each stays below 2**12). The rule's bias is what the ASCII codes add (ASCII_ZERO * weights).
_SUM_BITS: Final = 16
_SUM_MASK: Final = (1 << _SUM_BITS) - 1
_CheckRule = tuple[tuple[int, ...], int]


def _rule(first: tuple[int, ...], second: tuple[int, ...]) -> _CheckRule:
    """``first`` weighs the base; ``second`` the base and the first check digit."""
    weights = tuple(a + (b << _SUM_BITS) for a, b in zip((*first, 0), second, strict=True))
    return weights, _ASCII_ZERO * sum(weights)


_CPF_RULE: Final = _rule((10, 9, 8, 7, 6, 5, 4, 3, 2), (11, 10, 9, 8, 7, 6, 5, 4, 3, 2))
_CNPJ_RULE: Final = _rule(
    (5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2),
    (6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2),
)
# A numeric key's check-digit rule, and the reason when they are wrong, by key length.
_NUMERIC_RULES: Final = {
    CPF_LENGTH: (_CPF_RULE, Reason.INVALID_CPF),
    CNPJ_LENGTH: (_CNPJ_RULE, Reason.INVALID_CNPJ),
}
# Keys of one repeated character: their check digits hold, the rule rejects them. Only
# digits can repeat up to a key's check digits.
_REPEATED: Final = frozenset(d * n for d in (b"%d" % i for i in range(10)) for n in (11, 14))


def normalize_cpf_cnpj(raw: str) -> str | Reason:
    """Return the normalized key, or the Reason why it is invalid.

    Excel leftovers are format errors, not keys: scientific notation (``1,23457E+10``,
    digits lost) and text formulas (``="01234567890"``) carry ``, + = "``.
    """
    if raw.isascii():  # fast path: ASCII digits and ". - /" spaces, 11 or 14 digits
        codes = raw.encode("ascii").translate(None, _KEY_FORMATTING)
        numeric = _NUMERIC_RULES.get(len(codes))
        if numeric is not None and codes.isdigit():
            rule, reason = numeric
            return codes.decode("ascii") if _has_valid_check_digits(codes, rule) else reason
    return _normalize_key(raw)


def _normalize_key(raw: str) -> str | Reason:
    """``normalize_cpf_cnpj`` for any input."""
    key = _compact_key(raw)
    if not key:
        return Reason.MISSING_CPF_CNPJ
    # isascii before upper(): "ﬀ".upper() == "FF" would smuggle letters in.
    if not (key.isascii() and key.isalnum()) or len(key) > CNPJ_LENGTH:
        return Reason.INVALID_CPF_CNPJ_FORMAT
    key = _pad_numeric(key.upper())
    codes = key.encode("ascii")
    if len(key) == CPF_LENGTH and key.isdigit():
        valid, reason = _has_valid_check_digits(codes, _CPF_RULE), Reason.INVALID_CPF
    elif len(key) == CNPJ_LENGTH and key[_CNPJ_BASE_LENGTH:].isdigit():
        valid, reason = _has_valid_check_digits(codes, _CNPJ_RULE), Reason.INVALID_CNPJ
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


def _has_valid_check_digits(codes: bytes, rule: _CheckRule) -> bool:
    """Mod-11 check digits of a CPF or a (possibly alphanumeric, uppercase) CNPJ; no repeats.

    A check digit is 11 minus its weighted sum's remainder mod 11; 10 and 11 become 0.
    """
    weights, ascii_bias = rule
    sums: int = sum(map(mul, codes, weights)) - ascii_bias
    return (
        -(sums & _SUM_MASK) % 11 % 10 == codes[-2] - _ASCII_ZERO
        and -(sums >> _SUM_BITS) % 11 % 10 == codes[-1] - _ASCII_ZERO
        and codes not in _REPEATED
    )


# ---------------------------------------------------------------------------
# Phones
# ---------------------------------------------------------------------------

PHONE_MAX_RAW_LENGTH: Final = 64  # longer raw values are not phones: None, unparsed
_DEFAULT_REGION: Final = "BR"
_PHONE_PUNCTUATION: Final = " ().-"  # what the fast path accepts besides digits and one "+"
_PHONE_FORMATTING: Final = b" ().-+"
PhoneParts = tuple[str, int, str | None]  # a Phone's fields: (e164, country_code, country)


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
        "plain_valid",
        "plus_valid",
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
        self.plain_valid, self.plus_valid = self._common_shapes()

    def _common_shapes(self) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
        """Whole-number patterns of the valid numbers without a prefix to strip.

        ``plain_valid``: digits that are neither an IDD, the country code nor a national
        prefix, and valid as they are. ``plus_valid``: the country code, then such a number
        that is not a national prefix. One match replays all of ``_fast_national_number``
        and ``_br_phone`` for these shapes.
        """
        by_length = sorted(self.valid_by_length.items(), reverse=True)  # longest first
        valid = "|".join(rf"(?=\d{{{n}}}\Z)(?:{p.pattern})" for n, p in by_length)
        national = f"(?!{self.national_prefix.pattern})(?:{valid})"
        plain = f"(?!{self.idd.pattern})(?!{re.escape(self.country_prefix)}){national}"
        plus = f"{re.escape(self.country_prefix)}{national}"
        return re.compile(plain.encode("ascii")), re.compile(plus.encode("ascii"))

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
    parts = normalize_phone_parts(raw, international=international)
    return None if parts is None else Phone(*parts)


def normalize_phone_parts(raw: str, *, international: bool = False) -> PhoneParts | None:
    """``normalize_phone``'s fields as a tuple: for callers that do not keep the Phone.

    First the usual ways of writing a valid BR number: digits and ``( ) - .`` spaces,
    maybe ``+`` and the country code first, and no IDD, national prefix or plus-less
    country code to take off; one regex checks all that (``_RegionRules._common_shapes``).
    Anything else, invalid numbers included, goes the general way.
    """
    if raw.isascii():
        digits = raw.encode("ascii").translate(None, _PHONE_FORMATTING)
        if digits.isdigit() and len(raw) <= PHONE_MAX_RAW_LENGTH:
            if raw[0] == "+":
                if raw.count("+") == 1 and _BR.plus_valid.fullmatch(digits):
                    e164 = b"+" + digits  # the country code is already in the digits
                    return e164.decode("ascii"), _BR.country_code, _BR_COUNTRY
            elif not international and "+" not in raw and _BR.plain_valid.fullmatch(digits):
                return _BR_E164_PREFIX + digits.decode("ascii"), _BR.country_code, _BR_COUNTRY
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


def _br_phone(national: str) -> PhoneParts | None:
    pattern = _BR.valid_by_length.get(len(national))
    if pattern is None or pattern.fullmatch(national) is None:
        return None
    return _BR_E164_PREFIX + national, _BR.country_code, _BR_COUNTRY


def _library_phone(raw: str, *, international: bool) -> PhoneParts | None:
    region = None if international else _DEFAULT_REGION
    try:
        number = phonenumbers.parse(raw, region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number):
        return None
    e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    country_code = number.country_code or 0  # always set on a valid number
    return e164, country_code, phonenumbers.region_code_for_number(number)


# ---------------------------------------------------------------------------
# Emails
# ---------------------------------------------------------------------------

EMAIL_MAX_LENGTH: Final = 254
_LOCAL_MAX_LENGTH: Final = 64
_FAST_DOMAIN_MAX_LENGTH: Final = 63  # so that no label is longer than 63
_ATEXT: Final = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
# Plain ASCII only: dot-atom local part, >= 2 LDH labels, alphabetic TLD. Possessive
# quantifiers: what they take, nothing after them could use. The lengths, and the "--"
# of R-LDH and Punycode labels, are checked after the match (``_fast_email``).
_EMAIL_FAST: Final = re.compile(
    rf"([{_ATEXT}]++(?:\.[{_ATEXT}]++)*+)"
    r"@((?:[A-Za-z0-9]++(?:-++[A-Za-z0-9]++)*+\.)+[A-Za-z]{1,63})"
)
_SPECIAL_USE_SUFFIXES: Final = tuple(f".{name}" for name in SPECIAL_USE_DOMAIN_NAMES)


def normalize_email(raw: str) -> str | None:
    """Syntax-checked email with the domain lowercased (local part kept), or None.

    No DNS. Surrounding whitespace is trimmed first.
    """
    address = raw.strip()
    fast = _fast_email(address)
    if fast is None:
        return _library_email(address)
    domain = fast.group(2)
    lowered = domain.lower()
    if f".{lowered}".endswith(_SPECIAL_USE_SUFFIXES):
        return None  # .test, .local, ...: email_validator rejects them too
    return address if lowered == domain else f"{fast.group(1)}@{lowered}"


def _fast_email(address: str) -> re.Match[str] | None:
    """The (local part, domain) match of an address simple enough to decide without the
    library; None for any other (the library decides: IDN, "--", long parts, quotes ...)."""
    fast = _EMAIL_FAST.fullmatch(address) if len(address) <= EMAIL_MAX_LENGTH else None
    if fast is None or fast.end(1) > _LOCAL_MAX_LENGTH:
        return None
    domain = fast.group(2)
    if len(domain) > _FAST_DOMAIN_MAX_LENGTH or "--" in domain:
        return None
    return fast


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

# cython: language_level=3
"""Compiled per-record work of ``importer.core.normalize`` and ``importer.core.rows``.

The pure modules are the specification: every function here returns what its namesake there
returns (same values, the same Reason for a rejection), checked by the differential tests in
``tests/unit/test_rows_compiled.py`` and by ``fuzz/fuzz_rows.py``.

- ``normalize_cpf_cnpj``: any ASCII key (CPF, numeric and alphanumeric CNPJ, formatting,
  spreadsheet-dropped zeros) in C; a key with non-ASCII characters goes to the pure function.
- ``normalize_phone_parts``: the common BR shapes (digits and ``( ) - .`` spaces, maybe one
  leading ``+``) are scanned in C and matched against the pure module's own whole-number
  regexes, run as DFA tables built from them at import (``digitdfa``; the regex itself if a
  pattern cannot be converted); anything else (prefixes to strip, other countries, junk) goes the pure module's general way.
- ``normalize_email``: the pure fast path's grammar (dot-atom local part, LDH labels, an
  alphabetic TLD, the length and ``--`` rules) in C; whatever it cannot decide goes to the
  library path of the pure module.
- ``FastRowBuilder``: ``RowBuilder`` with the per-field dispatch in C.

Bounds: fixed buffers (a key's 14 characters, a phone's 64, a domain's 63); no allocation
grows with the input beyond the result strings themselves.

Imports: the standard library and ``importer.core`` only (the core's dependency rule).

Why this module is long: it is one extension so that the builder calls the normalizers as C
functions; each part is a few small functions, in the pure modules' order.
"""

from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.mem cimport PyMem_Malloc
from libc.string cimport memcmp, memcpy

from importer.core import digitdfa as _digitdfa
from importer.core import normalize as _pure
from importer.core import rows as _pure_rows
from importer.core.models import Channel, Phone, Reason, RowIssue, Severity
from importer.core.models import ContactRow, Detail


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)
    const unsigned char* PyUnicode_1BYTE_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    object PyUnicode_FromStringAndSize(const char*, Py_ssize_t)
    object PyUnicode_Substring(object, Py_ssize_t, Py_ssize_t)
    object PyBytes_FromStringAndSize(const char*, Py_ssize_t)
    Py_UCS4 PyUnicode_READ_CHAR(object, Py_ssize_t)
    bint Py_UNICODE_ISSPACE(Py_UCS4)


# ---------------------------------------------------------------------------
# Character classes (ASCII)
# ---------------------------------------------------------------------------

cdef inline bint _is_digit(unsigned char c) noexcept nogil:
    return c >= 48 and c <= 57


cdef inline bint _is_alpha(unsigned char c) noexcept nogil:
    return (c >= 65 and c <= 90) or (c >= 97 and c <= 122)


cdef inline bint _is_alnum(unsigned char c) noexcept nogil:
    return _is_digit(c) or _is_alpha(c)


cdef inline bint _is_space(unsigned char c) noexcept nogil:
    """``str.isspace`` for ASCII: tab to carriage return, the four separators, space."""
    return (c >= 9 and c <= 13) or (c >= 28 and c <= 32)


# ---------------------------------------------------------------------------
# CPF / CNPJ key
# ---------------------------------------------------------------------------

DEF CPF_LENGTH = 11
DEF CNPJ_LENGTH = 14

cdef object _MISSING = Reason.MISSING_CPF_CNPJ
cdef object _keyed_by_channel = _pure_rows.keyed_by_channel
cdef object _FORMAT = Reason.INVALID_CPF_CNPJ_FORMAT
cdef object _INVALID_CPF = Reason.INVALID_CPF
cdef object _INVALID_CNPJ = Reason.INVALID_CNPJ

cdef int[10] _CPF_FIRST = [10, 9, 8, 7, 6, 5, 4, 3, 2, 0]
cdef int[11] _CPF_SECOND = [11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 0]
cdef int[13] _CNPJ_FIRST = [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2, 0]
cdef int[14] _CNPJ_SECOND = [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2, 0]


cdef inline int _check_digit(const unsigned char* key, const int* weights, int n) noexcept nogil:
    """11 minus the weighted sum's remainder mod 11, where 10 and 11 become 0.

    A character's value is its ASCII code minus ``"0"`` (``"A"`` is 17): the key is
    uppercase alphanumeric, so every value and the sum are non-negative.
    """
    cdef int total = 0
    cdef int i
    for i in range(n):
        total += (key[i] - 48) * weights[i]
    return (11 - total % 11) % 11 % 10


cdef inline bint _valid_check_digits(const unsigned char* key, int n) noexcept nogil:
    """``normalize._has_valid_check_digits`` for an 11-digit CPF or a 14-place CNPJ."""
    cdef const int* first = _CNPJ_FIRST
    cdef const int* second = _CNPJ_SECOND
    if n == CPF_LENGTH:
        first = _CPF_FIRST
        second = _CPF_SECOND
    if _check_digit(key, first, n - 1) != key[n - 2] - 48:
        return False
    if _check_digit(key, second, n) != key[n - 1] - 48:
        return False
    cdef int i
    for i in range(1, n):  # one repeated character: the rule rejects it
        if key[i] != key[0]:
            return True
    return False


cdef object _key_ascii(const unsigned char* raw, Py_ssize_t length):
    """``normalize_cpf_cnpj`` for an ASCII string (``_normalize_key``, in one pass)."""
    cdef unsigned char key[CNPJ_LENGTH]
    cdef int n = 0
    cdef bint digits_only = True
    cdef unsigned char c
    cdef Py_ssize_t i
    cdef int pad
    for i in range(length):
        c = raw[i]
        if c == b'.' or c == b'-' or c == b'/' or _is_space(c):
            continue  # _compact_key's formatting
        if not _is_alnum(c) or n == CNPJ_LENGTH:
            return _FORMAT  # not alphanumeric, or longer than a CNPJ
        if c >= 97:
            c -= 32  # upper()
            digits_only = False
        elif c >= 65:
            digits_only = False
        key[n] = c
        n += 1
    if n == 0:
        return _MISSING
    if digits_only and n != CPF_LENGTH and n < CNPJ_LENGTH:  # _pad_numeric's zfill
        pad = (CPF_LENGTH if n < CPF_LENGTH else CNPJ_LENGTH) - n
        for i in range(n - 1, -1, -1):
            key[i + pad] = key[i]
        for i in range(pad):
            key[i] = b'0'
        n += pad
    if n == CPF_LENGTH and digits_only:
        if _valid_check_digits(key, n):
            return PyUnicode_FromStringAndSize(<const char*>key, n)
        return _INVALID_CPF
    if n == CNPJ_LENGTH and _is_digit(key[12]) and _is_digit(key[13]):
        if _valid_check_digits(key, n):
            return PyUnicode_FromStringAndSize(<const char*>key, n)
        return _INVALID_CNPJ
    return _FORMAT


cdef object _normalize_key_pure = _pure._normalize_key


cdef object _key(str raw):
    if PyUnicode_IS_ASCII(raw):
        return _key_ascii(PyUnicode_1BYTE_DATA(raw), PyUnicode_GET_LENGTH(raw))
    return _normalize_key_pure(raw)  # Unicode digits, spaces, letters: the pure rules


def normalize_cpf_cnpj(str raw):
    """``normalize.normalize_cpf_cnpj``: the normalized key, or the Reason it is invalid."""
    return _key(raw)


# ---------------------------------------------------------------------------
# Phones
# ---------------------------------------------------------------------------

DEF PHONE_MAX_RAW_LENGTH = 64

if _pure.PHONE_MAX_RAW_LENGTH != PHONE_MAX_RAW_LENGTH:
    raise ImportError("importer.core._rows: PHONE_MAX_RAW_LENGTH differs from the pure module")

cdef object _plain_valid = _pure._BR.plain_valid.fullmatch
cdef object _plus_valid = _pure._BR.plus_valid.fullmatch


cdef struct _Table:
    # digitdfa.DigitDFA in C: NULL transitions when the pattern could not be converted.
    unsigned short* transitions
    unsigned char* accepting
    int dead


cdef _Table _table(object pattern):
    """``pattern``'s DFA (see ``digitdfa``), allocated once for the module's lifetime."""
    cdef _Table table
    table.transitions = NULL
    try:
        dfa = _digitdfa.compile_digits(pattern)
    except (_digitdfa.UnsupportedPatternError, RecursionError):
        return table  # the regex decides
    cdef Py_ssize_t states = len(dfa.accepting), i
    if states > 65535:
        return table
    table.transitions = <unsigned short*>PyMem_Malloc(states * 10 * sizeof(unsigned short))
    table.accepting = <unsigned char*>PyMem_Malloc(states)
    if table.transitions == NULL or table.accepting == NULL:
        raise MemoryError()
    for i in range(states * 10):
        table.transitions[i] = dfa.transitions[i]
    for i in range(states):
        table.accepting[i] = dfa.accepting[i]
    table.dead = dfa.dead
    return table


cdef _Table _PLAIN = _table(_pure._BR.plain_valid)
cdef _Table _PLUS = _table(_pure._BR.plus_valid)


cdef bint _matches(_Table* table, object regex, const char* digits, Py_ssize_t n):
    """``regex(digits[:n]) is not None`` for ASCII digits: by the table when there is one."""
    if table.transitions == NULL:
        return regex(PyBytes_FromStringAndSize(digits, n)) is not None
    cdef int state = 0
    cdef Py_ssize_t i
    for i in range(n):
        state = table.transitions[state * 10 + (digits[i] - 48)]
        if state == table.dead:
            return False
    return table.accepting[state]


def compiled_tables():
    """Which phone patterns run as tables (False: by the regex), for the tests."""
    return {"plain_valid": _PLAIN.transitions != NULL, "plus_valid": _PLUS.transitions != NULL}
cdef object _BR_CODE = _pure._BR.country_code
cdef object _BR_COUNTRY = _pure._BR_COUNTRY
cdef bytes _BR_E164_PREFIX = _pure._BR_E164_PREFIX.encode("ascii")
cdef object _fast_national_number = _pure._fast_national_number
cdef object _library_phone = _pure._library_phone
cdef object _br_phone = _pure._br_phone


cdef object _phone_general(str raw, bint international):
    """``normalize_phone_parts`` after its first fast path: the pure module's general way."""
    if PyUnicode_GET_LENGTH(raw) > PHONE_MAX_RAW_LENGTH:
        return None
    national = _fast_national_number(raw, international=international)
    if national is None:
        return _library_phone(raw, international=international)
    return _br_phone(national)


cdef Py_ssize_t _PREFIX_LENGTH = len(_BR_E164_PREFIX)  # "+55"
if not 2 <= _PREFIX_LENGTH <= 4:
    raise ImportError("importer.core._rows: unexpected BR country prefix")


cdef object _phone_common(str raw, bint international):
    """The common BR shapes, or ``NotImplemented`` when the general way must decide.

    ``normalize_phone_parts``' first test: ASCII, at most 64 characters, digits (at least
    one) and ``( ) - . +`` spaces; then one leading ``+`` and ``plus_valid``, or no ``+``
    and ``plain_valid`` (not for ``international``), on the digits.
    """
    cdef Py_ssize_t length = PyUnicode_GET_LENGTH(raw)
    if not PyUnicode_IS_ASCII(raw) or length > PHONE_MAX_RAW_LENGTH or length == 0:
        return NotImplemented
    cdef const unsigned char* data = PyUnicode_1BYTE_DATA(raw)
    # The result's characters: room for "+55" before the digits (at most 64 of them).
    cdef char buffer[4 + PHONE_MAX_RAW_LENGTH]
    cdef char* digits = buffer + _PREFIX_LENGTH
    cdef Py_ssize_t n = 0
    cdef int plus = 0
    cdef Py_ssize_t i
    cdef unsigned char c
    for i in range(length):
        c = data[i]
        if _is_digit(c):
            digits[n] = c
            n += 1
        elif c == b'+':
            plus += 1
        elif not (c == b' ' or c == b'(' or c == b')' or c == b'.' or c == b'-'):
            return NotImplemented
    if n == 0:
        return NotImplemented
    if data[0] == b'+':
        if plus == 1 and _matches(&_PLUS, _plus_valid, digits, n):
            buffer[_PREFIX_LENGTH - 1] = b'+'  # the country code is already in the digits
            return (PyUnicode_FromStringAndSize(digits - 1, n + 1), _BR_CODE, _BR_COUNTRY)
    elif not international and plus == 0:
        if _matches(&_PLAIN, _plain_valid, digits, n):
            memcpy(buffer, <const char*>_BR_E164_PREFIX, _PREFIX_LENGTH)
            e164 = PyUnicode_FromStringAndSize(buffer, _PREFIX_LENGTH + n)
            return (e164, _BR_CODE, _BR_COUNTRY)
    return NotImplemented


cdef object _phone_parts(str raw, bint international):
    parts = _phone_common(raw, international)
    if parts is NotImplemented:
        return _phone_general(raw, international)
    return parts


def normalize_phone_parts(str raw, *, bint international=False):
    """``normalize.normalize_phone_parts``: (e164, country code, country) or None."""
    return _phone_parts(raw, international)




# ---------------------------------------------------------------------------
# E-mails
# ---------------------------------------------------------------------------

DEF EMAIL_MAX_LENGTH = 254
DEF LOCAL_MAX_LENGTH = 64
DEF DOMAIN_MAX_LENGTH = 63  # the fast path's: no label can be longer

if (
    _pure.EMAIL_MAX_LENGTH != EMAIL_MAX_LENGTH
    or _pure._LOCAL_MAX_LENGTH != LOCAL_MAX_LENGTH
    or _pure._FAST_DOMAIN_MAX_LENGTH != DOMAIN_MAX_LENGTH
):
    raise ImportError("importer.core._rows: the e-mail limits differ from the pure module")

# The dot-atom's atext (RFC 5322): letters, digits and these.
cdef bytes _ATEXT_SYMBOLS = b"!#$%&'*+/=?^_`{|}~-"
cdef bint _ATEXT[128]
cdef int _code
for _code in range(128):
    _ATEXT[_code] = _is_alnum(_code) or bytes([_code]) in _ATEXT_SYMBOLS

# "name" and ".name" suffixes of the special-use domains (email_validator rejects them).
cdef tuple _SPECIAL_USE = tuple(
    ("." + suffix.lstrip(".")).encode("ascii") for suffix in _pure._SPECIAL_USE_SUFFIXES
)
cdef object _library_email = _pure._library_email
cdef object _pure_email = _pure.normalize_email


cdef Py_ssize_t _local_end(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Where a dot-atom local part followed by ``@`` ends (the ``@``'s index), or -1."""
    cdef Py_ssize_t i
    cdef unsigned char c
    cdef bint after_dot = True  # the start, or just after a dot: an atext must follow
    for i in range(n):
        c = s[i]
        if c == b'@':
            return -1 if after_dot else i
        if c == b'.':
            if after_dot:
                return -1
            after_dot = True
        elif c < 128 and _ATEXT[c]:
            after_dot = False
        else:
            return -1
    return -1


cdef bint _fast_domain(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """LDH labels each followed by a dot, then 1 to 63 letters; no ``--`` anywhere.

    A label starts and ends with a letter or digit (``-++`` between alphanumerics).
    """
    if n > DOMAIN_MAX_LENGTH or n == 0:
        return False
    cdef Py_ssize_t i, last_dot = -1
    cdef unsigned char c, previous = b'.'
    for i in range(n):
        c = s[i]
        if c == b'.':
            if previous == b'.' or previous == b'-':
                return False  # an empty label, or one ending with "-"
            last_dot = i
        elif c == b'-':
            if previous == b'.' or previous == b'-':
                return False  # a label starting with "-", or "--"
        elif not _is_alnum(c):
            return False
        previous = c
    if last_dot < 0 or last_dot == n - 1:
        return False
    for i in range(last_dot + 1, n):  # the TLD: letters only
        if not _is_alpha(s[i]):
            return False
    return True


cdef bint _special_use(const unsigned char* domain, Py_ssize_t n):
    """``f".{domain}".endswith(_SPECIAL_USE_SUFFIXES)`` for a lowercase domain with a dot."""
    cdef bytes suffix
    cdef Py_ssize_t k
    for suffix in _SPECIAL_USE:
        k = len(suffix)
        if k <= n and memcmp(domain + n - k, <const char*>suffix, k) == 0:
            return True
        if k - 1 == n and memcmp(domain, (<const char*>suffix) + 1, n) == 0:
            return True
    return False


cdef object _email(str raw):
    if not PyUnicode_IS_ASCII(raw):
        return _pure_email(raw)  # Unicode whitespace, IDN, internationalized local parts
    cdef const unsigned char* s = PyUnicode_1BYTE_DATA(raw)
    cdef Py_ssize_t start = 0, end = PyUnicode_GET_LENGTH(raw)
    while start < end and _is_space(s[start]):
        start += 1
    while end > start and _is_space(s[end - 1]):
        end -= 1
    address = raw if start == 0 and end == PyUnicode_GET_LENGTH(raw) else (
        PyUnicode_Substring(raw, start, end)
    )
    s += start
    cdef Py_ssize_t n = end - start
    cdef Py_ssize_t at = _local_end(s, n) if n <= EMAIL_MAX_LENGTH else -1
    if at < 0 or at > LOCAL_MAX_LENGTH or not _fast_domain(s + at + 1, n - at - 1):
        return _library_email(address)
    cdef unsigned char lowered[DOMAIN_MAX_LENGTH]
    cdef Py_ssize_t domain_length = n - at - 1
    cdef bint changed = False
    cdef Py_ssize_t i
    cdef unsigned char c
    for i in range(domain_length):
        c = s[at + 1 + i]
        if c >= 65 and c <= 90:
            c += 32
            changed = True
        lowered[i] = c
    if _special_use(lowered, domain_length):
        return None  # .test, .local, ...: email_validator rejects them too
    if not changed:
        return address
    cdef char result[EMAIL_MAX_LENGTH]
    memcpy(result, s, at + 1)
    memcpy(result + at + 1, lowered, domain_length)
    return PyUnicode_FromStringAndSize(result, n)


def normalize_email(str raw):
    """``normalize.normalize_email``: the address with its domain lowercased, or None."""
    return _email(raw)


# ---------------------------------------------------------------------------
# The row builder
# ---------------------------------------------------------------------------

DEF MAX_CHANNEL_CHARS = 320
DEF REPORT_VALUE_CHARS = 1024

if (
    _pure_rows._MAX_CHANNEL_CHARS != MAX_CHANNEL_CHARS
    or _pure_rows._REPORT_VALUE_CHARS != REPORT_VALUE_CHARS
):
    raise ImportError("importer.core._rows: the row limits differ from the pure module")

# The column kinds, as rows.py numbers them.
DEF CUSTOM = 0
DEF PHONE = 1
DEF NAME = 2
DEF ADDRESS = 3
DEF KEY = 4
DEF EMAIL = 5
DEF JOURNEY = 6

if (
    _pure_rows._CUSTOM, _pure_rows._PHONE, _pure_rows._NAME, _pure_rows._ADDRESS,
    _pure_rows._KEY, _pure_rows._EMAIL, _pure_rows._JOURNEY,
) != (CUSTOM, PHONE, NAME, ADDRESS, KEY, EMAIL, JOURNEY):
    raise ImportError("importer.core._rows: the column kinds differ from the pure module")

cdef object _Reason = Reason
cdef object _TOO_MANY = Reason.TOO_MANY_FIELDS
cdef object _TOO_FEW = Reason.TOO_FEW_FIELDS
cdef object _INVALID_PHONE = Reason.INVALID_PHONE
cdef object _INVALID_EMAIL = Reason.INVALID_EMAIL
cdef object _TOO_LONG = Reason.VALUE_TOO_LONG
cdef object _SEVERITY_INVALID = Severity.INVALID
cdef object _SEVERITY_WARNING = Severity.WARNING
cdef object _column_of = _pure_rows._column

# Detail, ContactRow and RowIssue are frozen slotted dataclasses whose __init__ only sets each
# field's slot (models.slot_setters checks that of the first two at import; _slot_offsets of all three).
# The builder makes them as that __init__ would, without its per-field lookups: the type's
# allocation, then a store into each slot.
DEF T_OBJECT_EX = 16
DEF READONLY = 1

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    ctypedef struct PyTypeObject:
        object (*tp_alloc)(PyTypeObject*, Py_ssize_t)  # a new reference
    ctypedef struct PyObject
    void Py_INCREF(object)

import dataclasses as _dataclasses
import types as _types

DEF MAX_SLOTS = 6


cdef struct _Shape:
    PyTypeObject* cls
    int count
    Py_ssize_t offsets[MAX_SLOTS]


cdef _Shape _slot_offsets(type cls, tuple names):
    """Where ``cls``'s fields live; ImportError when it is not the plain dataclass assumed."""
    cdef _Shape shape
    fields = tuple(f.name for f in _dataclasses.fields(cls))
    if fields != names or hasattr(cls, "__post_init__") or len(names) > MAX_SLOTS:
        raise ImportError(f"importer.core._rows: {cls.__name__} is not the dataclass it expects")
    if cls.__new__ is not object.__new__:
        raise ImportError(f"importer.core._rows: {cls.__name__} has its own __new__")
    cdef PyMemberDef* member
    shape.cls = <PyTypeObject*>cls
    shape.count = len(names)
    for i, name in enumerate(names):
        slot = vars(cls).get(name)
        if type(slot) is not _types.MemberDescriptorType:
            raise ImportError(f"importer.core._rows: {cls.__name__}.{name} is not a slot")
        member = (<PyMemberDescrObject*><PyObject*>slot).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY:
            raise ImportError(f"importer.core._rows: {cls.__name__}.{name} is not a plain slot")
        shape.offsets[i] = member.offset
    return shape


cdef _Shape _DETAIL = _slot_offsets(Detail, ("channel", "value", "country_code", "country"))
cdef _Shape _ROW = _slot_offsets(
    ContactRow, ("line", "cpf_cnpj", "name", "street_address", "details", "custom_fields")
)
cdef _Shape _ISSUE = _slot_offsets(RowIssue, ("line", "column", "reason", "value", "severity"))
cdef _Shape _PHONE = _slot_offsets(Phone, ("e164", "country_code", "country"))


cdef inline object _allocate(_Shape* shape):
    """A new instance of the shape's class, its slots empty (``object.__new__(cls)``)."""
    return shape.cls.tp_alloc(shape.cls, 0)


cdef inline void _store(object instance, _Shape* shape, int i, object value):
    """Fill empty slot ``i`` of a new instance (what the slot's ``__set__`` does)."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>instance) + shape.offsets[i]))[0] = <PyObject*>value


cdef inline object _detail(object channel, object value, object country_code, object country):
    """``Detail(channel, value, country_code, country)``."""
    detail = _allocate(&_DETAIL)
    _store(detail, &_DETAIL, 0, channel)
    _store(detail, &_DETAIL, 1, value)
    _store(detail, &_DETAIL, 2, country_code)
    _store(detail, &_DETAIL, 3, country)
    return detail


cdef inline object _issue(object line, object column, object reason, object value, object severity):
    """``RowIssue(line, column, reason, value, severity)``."""
    issue = _allocate(&_ISSUE)
    _store(issue, &_ISSUE, 0, line)
    _store(issue, &_ISSUE, 1, column)
    _store(issue, &_ISSUE, 2, reason)
    _store(issue, &_ISSUE, 3, value)
    _store(issue, &_ISSUE, 4, severity)
    return issue


cdef inline object _warning(object line, object column, object reason, str value):
    if PyUnicode_GET_LENGTH(value) > REPORT_VALUE_CHARS:
        value = value[:REPORT_VALUE_CHARS]
    return _issue(line, column, reason, value, _SEVERITY_WARNING)


cdef object _stripped(object field):
    """``field.strip()``; a str with no whitespace at either end is itself (as strip returns)."""
    if type(field) is not str:
        return field.strip()
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(field)
    if n == 0:
        return field
    if Py_UNICODE_ISSPACE(PyUnicode_READ_CHAR(field, 0)) or Py_UNICODE_ISSPACE(
        PyUnicode_READ_CHAR(field, n - 1)
    ):
        return field.strip()
    return field


cdef class FastRowBuilder:
    """``rows.RowBuilder``, compiled: same constructor, same ``build`` results."""

    cdef readonly object plan
    cdef bint _international
    cdef Py_ssize_t _max_value
    cdef tuple _columns  # rows._column tuples: (index, kind, name, channel, custom name)
    cdef Py_ssize_t _width
    cdef object _key_column
    cdef object _key_channel

    def __init__(self, plan, *, international, max_value_chars):
        self.plan = plan
        self._international = bool(international)
        self._max_value = max_value_chars
        self._columns = tuple(_column_of(c) for c in plan.columns)
        self._width = max((c.index + 1 for c in plan.columns), default=0)
        self._key_channel = plan.key_channel
        self._key_column = _pure_rows.key_column(plan)

    def build(self, line, fields):
        """One record → (row or None when invalid, issues); see ``RowBuilder.build``."""
        expected = self.plan.field_count
        cdef Py_ssize_t count = len(fields)
        if expected is not None and count != expected:
            reason = _TOO_MANY if count > expected else _TOO_FEW
            detail = f"{count} fields, header has {expected}"
            return None, [_issue(line, None, reason, detail, _SEVERITY_INVALID)]
        if count < self._width:
            fields = [*fields, *[""] * (self._width - count)]
        elif type(fields) is not list:
            fields = list(fields)
        cdef list values = <list>fields
        cdef Py_ssize_t limit = self._max_value
        cdef object key = None
        cdef object name = None
        cdef object street_address = None
        cdef list details = []
        cdef list custom = []
        cdef list issues = []
        cdef object phone_raw = None
        cdef object phone = None
        cdef tuple column
        cdef Py_ssize_t index
        cdef int kind
        cdef object value
        for column in self._columns:
            index = <object>PyTuple_GET_ITEM(column, 0)
            value = _stripped(values[index])
            if not value:
                continue
            kind = <object>PyTuple_GET_ITEM(column, 1)
            if kind == CUSTOM:
                if len(value) <= limit:
                    custom.append((<object>PyTuple_GET_ITEM(column, 4), value))
                else:
                    issues.append(
                        _warning(line, <object>PyTuple_GET_ITEM(column, 2), _TOO_LONG, value)
                    )
            elif kind == PHONE:
                if phone_raw is None or value != phone_raw:
                    phone_raw = value
                    phone = _phone_parts(value, self._international)
                if phone is not None:
                    details.append(
                        _detail(
                            <object>PyTuple_GET_ITEM(column, 3),
                            <object>PyTuple_GET_ITEM(<tuple>phone, 0),
                            <object>PyTuple_GET_ITEM(<tuple>phone, 1),
                            <object>PyTuple_GET_ITEM(<tuple>phone, 2),
                        )
                    )
                else:
                    issues.append(
                        _warning(line, <object>PyTuple_GET_ITEM(column, 2), _INVALID_PHONE, value)
                    )
            elif kind == NAME or kind == ADDRESS:
                if len(value) <= limit:
                    if kind == NAME:
                        name = value
                    else:
                        street_address = value
                else:
                    issues.append(
                        _warning(line, <object>PyTuple_GET_ITEM(column, 2), _TOO_LONG, value)
                    )
            elif kind == KEY:
                key = _key(value)
                if type(key) is _Reason:
                    issues.append(
                        _issue(
                            line, <object>PyTuple_GET_ITEM(column, 2), key, value,
                            _SEVERITY_INVALID,
                        )
                    )
            elif kind == EMAIL:
                email = _email(value) if len(value) <= MAX_CHANNEL_CHARS else None
                if email is not None:
                    details.append(_detail(<object>PyTuple_GET_ITEM(column, 3), email, None, None))
                else:
                    issues.append(
                        _warning(line, <object>PyTuple_GET_ITEM(column, 2), _INVALID_EMAIL, value)
                    )
            elif len(value) <= MAX_CHANNEL_CHARS:  # JOURNEY
                details.append(_detail(<object>PyTuple_GET_ITEM(column, 3), value, None, None))
            else:
                issues.append(_warning(line, <object>PyTuple_GET_ITEM(column, 2), _TOO_LONG, value))
        if key is None:
            if self._key_channel is not None:  # a channel key: the key column's detail
                key = _keyed_by_channel(line, self._key_channel, self._key_column, details, issues)
                if key is None:
                    return None, issues
            else:
                key = _MISSING
                issues.insert(0, _issue(line, self._key_column, key, None, _SEVERITY_INVALID))
        if type(key) is _Reason:
            return None, issues
        row = _allocate(&_ROW)
        _store(row, &_ROW, 0, line)
        _store(row, &_ROW, 1, key)
        _store(row, &_ROW, 2, name)
        _store(row, &_ROW, 3, street_address)
        _store(row, &_ROW, 4, tuple(details))
        _store(row, &_ROW, 5, tuple(custom))
        return row, issues


def normalize_phone(str raw, *, bint international=False):
    """``normalize.normalize_phone``: the Phone, or None when not a valid number."""
    parts = _phone_parts(raw, international)
    if parts is None:
        return None
    phone = _allocate(&_PHONE)
    cdef int i
    for i in range(3):
        _store(phone, &_PHONE, i, <object>PyTuple_GET_ITEM(<tuple>parts, i))
    return phone

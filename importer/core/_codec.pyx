# cython: language_level=3, boundscheck=True, wraparound=False
"""The compiled twin of ``importer.core.codec`` (version 2 messages): same bytes from
:func:`encode`, same batches from :func:`decode`, the same inputs refused
(MalformedMessageError). The pure module is the specification; this one only does the same
work without a bytecode loop per value:

* encode reads the rows' slots through their member descriptors and fills the column lists,
  then ``orjson.dumps`` writes the document;
* decode lets ``orjson.loads`` parse the document, then checks each array as it makes the
  objects, which it makes as their dataclass ``__init__`` would (``object.__new__`` and each
  slot's setter, as ``core.rows`` does), minus the interpreter.

Version 1 messages go to the pure decoder (they only come from an older version's queues).
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE, descrgetfunc, descrsetfunc
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_GET_LENGTH

import uuid

import orjson

from importer.core import codec as _pure
from importer.core import codec_v1 as _codec_v1
from importer.core.errors import MalformedMessageError
from importer.core.models import Batch, ContactRow, Detail, RowIssue, slot_setters

# ------------------------------------------------------------------------------ slots


def _descriptors(cls, names):
    """The member descriptors of a slotted dataclass's fields, which must be ``names`` in
    order (the models' own check: a change to them fails at import)."""
    slot_setters(cls, names)
    return tuple(vars(cls)[name] for name in names)


cdef object _D_CHANNEL, _D_VALUE, _D_COUNTRY_CODE, _D_COUNTRY
cdef object _R_LINE, _R_KEY, _R_NAME, _R_ADDRESS, _R_DETAILS, _R_CUSTOM
_D_CHANNEL, _D_VALUE, _D_COUNTRY_CODE, _D_COUNTRY = _descriptors(
    Detail, ("channel", "value", "country_code", "country")
)
_R_LINE, _R_KEY, _R_NAME, _R_ADDRESS, _R_DETAILS, _R_CUSTOM = _descriptors(
    ContactRow, ("line", "cpf_cnpj", "name", "street_address", "details", "custom_fields")
)

# Every member descriptor is of one type: its get and set functions.
cdef descrgetfunc _member_get = Py_TYPE(_R_LINE).tp_descr_get
cdef descrsetfunc _member_set = Py_TYPE(_R_LINE).tp_descr_set
cdef object _DETAIL_TYPE = Detail
cdef object _ROW_TYPE = ContactRow
cdef tuple _NO_ARGS = ()


cdef inline object _get(object descr, object obj):
    """``obj``'s slot (AttributeError when unset; TypeError when ``obj`` is not of its class)."""
    return _member_get(descr, obj, None)


cdef inline object _new(object cls):
    """``object.__new__(cls)``: every slot unset, to be set at once."""
    return (<PyTypeObject*>cls).tp_new(cls, <PyObject*>_NO_ARGS, NULL)


cdef object _make_detail(object channel, object value, object country_code, object country):
    cdef object detail = _new(_DETAIL_TYPE)
    _member_set(_D_CHANNEL, detail, channel)
    _member_set(_D_VALUE, detail, value)
    _member_set(_D_COUNTRY_CODE, detail, country_code)
    _member_set(_D_COUNTRY, detail, country)
    return detail


cdef object _make_row(object line, object key, object name, object address, tuple details,
                      tuple custom):
    cdef object row = _new(_ROW_TYPE)
    _member_set(_R_LINE, row, line)
    _member_set(_R_KEY, row, key)
    _member_set(_R_NAME, row, name)
    _member_set(_R_ADDRESS, row, address)
    _member_set(_R_DETAILS, row, details)
    _member_set(_R_CUSTOM, row, custom)
    return row


# ------------------------------------------------------------------------------ encoding


def encode(job_id, owner, batch):
    """The version 2 message of ``batch``: the bytes ``codec.encode`` writes."""
    cdef list lines = [], keys = [], names = [], addresses = [], detail_counts = []
    cdef list custom_counts = [], channels = [], values = [], country_codes = []
    cdef list countries = [], fields = [], field_indexes = [], custom_values = []
    cdef dict index = {}
    cdef object row, detail, pair, position
    for row in batch.rows:
        if type(row) is not _ROW_TYPE:  # a subclass or a stand-in: by name, as the pure one
            row = ContactRow(row.line, row.cpf_cnpj, row.name, row.street_address,
                             tuple(row.details), tuple(row.custom_fields))
        lines.append(_get(_R_LINE, row))
        keys.append(_get(_R_KEY, row))
        names.append(_get(_R_NAME, row))
        addresses.append(_get(_R_ADDRESS, row))
        details = _get(_R_DETAILS, row)
        custom = _get(_R_CUSTOM, row)
        detail_counts.append(len(details))
        custom_counts.append(len(custom))
        for detail in details:
            if type(detail) is _DETAIL_TYPE:
                channels.append(_get(_D_CHANNEL, detail))
                values.append(_get(_D_VALUE, detail))
                country_codes.append(_get(_D_COUNTRY_CODE, detail))
                countries.append(_get(_D_COUNTRY, detail))
            else:
                channels.append(detail.channel)
                values.append(detail.value)
                country_codes.append(detail.country_code)
                countries.append(detail.country)
        for pair in custom:
            name, value = pair
            position = index.get(name)
            if position is None:
                position = len(fields)
                index[name] = position
                fields.append(name)
            field_indexes.append(position)
            custom_values.append(value)
    issues = batch.issues
    return orjson.dumps(
        {
            "v": _pure.VERSION,
            "job": str(job_id),
            "owner": owner,
            "chunk": batch.chunk_no,
            "partition": batch.partition,
            "part": batch.part,
            "first_line": batch.first_line,
            "end_offset": batch.end_offset,
            "end_line": batch.end_line,
            "invalid": batch.invalid,
            "rows": {
                "line": lines,
                "key": keys,
                "name": names,
                "address": addresses,
                "details": detail_counts,
                "custom": custom_counts,
            },
            "details": {
                "channel": channels,
                "value": values,
                "country_code": country_codes,
                "country": countries,
            },
            "custom": {"names": fields, "name": field_indexes, "value": custom_values},
            "issues": {
                "line": [i.line for i in issues],
                "column": [i.column for i in issues],
                "reason": [i.reason for i in issues],
                "value": [i.value for i in issues],
                "severity": [i.severity for i in issues],
            },
        }
    )


# ------------------------------------------------------------------------------ decoding

cdef long long _MAX_BATCH_ROWS = _pure.MAX_BATCH_ROWS
cdef object _KEYS = _pure.KEYS
cdef object _ROW_KEYS = _pure.ROW_KEYS
cdef object _DETAIL_KEYS = _pure.DETAIL_KEYS
cdef object _CUSTOM_KEYS = _pure.CUSTOM_KEYS
cdef object _ISSUE_KEYS = _pure.ISSUE_KEYS
cdef dict _CHANNELS = _pure.CHANNELS
cdef dict _REASONS = _pure.REASONS
cdef dict _SEVERITIES = _pure.SEVERITIES
cdef Py_ssize_t _DEFAULT_LIMIT = _pure.text_limit(_pure.Limits())


class _Refused(ValueError):
    """A shape deviation found by this module (made MalformedMessageError by decode)."""


def decode(body, limits=None):
    """The message ``codec.decode`` reads from ``body``; MalformedMessageError when it refuses."""
    doc = _pure.load(body)
    cdef Py_ssize_t limit = _DEFAULT_LIMIT if limits is None else _pure.text_limit(limits)
    try:
        if type(doc) is dict:
            version = doc.get("v")
            if type(version) is int and version == _pure.VERSION:
                return _message(doc, limit)
            if type(version) is int and version == 1:
                return _pure.BatchMessage(*_codec_v1.message_v1(doc))
        raise _Refused("unknown message version")
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MalformedMessageError(f"not a batch message: {type(exc).__name__}: {exc}") from exc


cdef object _message(dict doc, Py_ssize_t limit):
    if doc.keys() != _KEYS:
        raise _Refused(f"fields {sorted(doc.keys() ^ _KEYS)} unexpected or missing")
    rows, names = _rows(doc, limit)
    part = _count(doc["part"])
    if part < 1:
        raise _Refused(f"part {part}")
    batch = Batch(
        chunk_no=_count(doc["chunk"]),
        partition=_count(doc["partition"]),
        first_line=_count(doc["first_line"]),
        end_offset=_count(doc["end_offset"]),
        rows=rows,
        issues=_issues(doc["issues"], limit),
        invalid=_count(doc["invalid"]),
        part=part,
        end_line=_count(doc["end_line"]),
    )
    job_id = uuid.UUID(_text(doc["job"], limit))
    return _pure.BatchMessage(job_id, _text(doc["owner"], limit), batch, names)


cdef tuple _rows(dict doc, Py_ssize_t limit):
    """The rows of the three tables, and the custom field names they use (as codec._rows)."""
    cdef dict rows = _table(doc["rows"], _ROW_KEYS)
    cdef list lines = _column(rows["line"], -1)
    cdef Py_ssize_t n = len(lines)
    cdef list keys = _column(rows["key"], n)
    cdef list names = _column(rows["name"], n)
    cdef list addresses = _column(rows["address"], n)
    cdef list detail_counts = _column(rows["details"], n)
    cdef list custom_counts = _column(rows["custom"], n)

    cdef dict details = _table(doc["details"], _DETAIL_KEYS)
    cdef list channels = _column(details["channel"], -2)
    cdef Py_ssize_t d = len(channels)
    cdef list values = _column(details["value"], d)
    cdef list country_codes = _column(details["country_code"], d)
    cdef list countries = _column(details["country"], d)

    cdef dict custom = _table(doc["custom"], _CUSTOM_KEYS)
    cdef list fields = _column(custom["names"], -1)
    cdef list indexes = _column(custom["name"], -2)
    cdef Py_ssize_t c = len(indexes)
    cdef list custom_values = _column(custom["value"], c)
    _check_fields(fields, indexes, limit)

    cdef list made = []
    cdef Py_ssize_t i, k, count, at_detail = 0, at_custom = 0
    cdef tuple row_details, row_custom
    cdef object line, key, name, address, field, pair, detail
    for i in range(n):
        line = _count(lines[i])
        key = _text(keys[i], limit)
        name = _opt_text(names[i], limit)
        address = _opt_text(addresses[i], limit)
        count = _run(detail_counts[i], d - at_detail)
        row_details = PyTuple_New(count)
        for k in range(count):
            detail = _detail(channels, values, country_codes, countries, at_detail, limit)
            Py_INCREF(detail)
            PyTuple_SET_ITEM(row_details, k, detail)
            at_detail += 1
        count = _run(custom_counts[i], c - at_custom)
        row_custom = PyTuple_New(count)
        for k in range(count):
            field = fields[_index(indexes[at_custom], len(fields))]
            pair = (field, _text(custom_values[at_custom], limit))
            Py_INCREF(pair)
            PyTuple_SET_ITEM(row_custom, k, pair)
            at_custom += 1
        made.append(_make_row(line, key, name, address, row_details, row_custom))
    if at_detail != d or at_custom != c:
        raise _Refused("detail or custom counts do not add up")
    return tuple(made), tuple(fields)


cdef object _detail(list channels, list values, list country_codes, list countries,
                    Py_ssize_t at, Py_ssize_t limit):
    raw = channels[at]
    if not PyLong_CheckExact(raw):
        raise _Refused("expected a channel")
    channel = _CHANNELS[raw]
    code = country_codes[at]
    if code is not None:
        _count(code)
    return _make_detail(channel, _text(values[at], limit), code,
                        _opt_text(countries[at], limit))


cdef int _check_fields(list fields, list indexes, Py_ssize_t limit) except -1:
    """The names: texts, each once, each used; the indexes: counts (range: ``_index``)."""
    for name in fields:
        _text(name, limit)
    for position in indexes:
        _count(position)
    if len(set(fields)) != len(fields) or len(set(indexes)) != len(fields):
        raise _Refused("custom field names repeated or unused")
    return 0


cdef Py_ssize_t _index(object position, Py_ssize_t size) except -1:
    """A count (checked by _check_fields) as an index of a list of ``size`` items."""
    cdef int overflow = 0
    cdef long long value = PyLong_AsLongLongAndOverflow(position, &overflow)
    if overflow != 0 or value < 0 or value >= size:
        raise IndexError("custom field name index out of range")
    return <Py_ssize_t>value


cdef tuple _issues(object value, Py_ssize_t limit):
    cdef dict issues = _table(value, _ISSUE_KEYS)
    cdef list lines = _column(issues["line"], -1)
    cdef Py_ssize_t n = len(lines)
    cdef list columns = _column(issues["column"], n)
    cdef list reasons = _column(issues["reason"], n)
    cdef list values = _column(issues["value"], n)
    cdef list severities = _column(issues["severity"], n)
    cdef list made = []
    cdef Py_ssize_t i
    for i in range(n):
        made.append(
            RowIssue(
                _count(lines[i]),
                _opt_text(columns[i], limit),
                _REASONS[_text(reasons[i], limit)],
                _opt_text(values[i], limit),
                _SEVERITIES[_text(severities[i], limit)],
            )
        )
    return tuple(made)


cdef dict _table(object value, object keys):
    if type(value) is not dict or value.keys() != keys:
        raise _Refused(f"expected a table of {sorted(keys)}")
    return <dict>value


cdef list _column(object value, Py_ssize_t length):
    """A JSON array of ``length`` items; -1: any length up to MAX_BATCH_ROWS; -2: any."""
    if type(value) is not list:
        raise TypeError(f"expected an array, got {type(value).__name__}")
    cdef Py_ssize_t size = len(<list>value)
    if length == -1:
        if size > _MAX_BATCH_ROWS:
            raise _Refused(f"{size} items: over {_MAX_BATCH_ROWS}")
    elif length >= 0 and size != length:
        raise _Refused(f"{size} items, expected {length}")
    return <list>value


cdef object _count(object value):
    """An int 0..MAX_COUNT (2**63 - 1: a C long long); TypeError for anything else."""
    cdef int overflow = 0
    cdef long long number
    if not PyLong_CheckExact(value):
        raise TypeError(f"expected a count, got {value!r}")
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0 or number < 0:
        raise TypeError(f"expected a count, got {value!r}")
    return value


cdef Py_ssize_t _run(object value, Py_ssize_t left) except -1:
    """A row's count of details (or custom fields): a count no larger than those left."""
    cdef int overflow = 0
    cdef long long number
    if not PyLong_CheckExact(value):
        raise TypeError("expected a count")
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0 or number < 0 or number > left:
        raise _Refused("detail or custom counts do not add up")
    return <Py_ssize_t>number


cdef object _text(object value, Py_ssize_t limit):
    if not PyUnicode_CheckExact(value) or PyUnicode_GET_LENGTH(value) > limit:
        raise TypeError("expected a text")
    return value


cdef object _opt_text(object value, Py_ssize_t limit):
    if value is None:
        return None
    return _text(value, limit)

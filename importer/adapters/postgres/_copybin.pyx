# cython: language_level=3
"""The binary COPY payload built in one C buffer: the compiled twin of ``copybin.encode``.

Same bytes, same errors, in the same order (``copybin`` is the specification). The buffer grows
by doubling (a failed allocation is a MemoryError) and every length is checked against its
int32 field before it is written; the payload is handed back as one ``bytearray``.

The GIL stays held: every field is a Python object read (a str's bytes, an int's value), and
the C work between two reads is a few bytes of copying, too little to gain from releasing it.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.long cimport PyLong_AsLongLong, PyLong_Check
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcpy

from importer.adapters.postgres.copybin import HEADER, MAX_COLUMNS, Kind, nul_refused, uuid_bytes
from importer.core.merge import ContactRow, merged

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    int PyUnicode_READY(object) except -1
    bint PyUnicode_IS_ASCII(object)
    int PyUnicode_KIND(object)
    int PyUnicode_1BYTE_KIND
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

# The column kinds (copybin.Kind's values).
cdef enum:
    K_INT2 = 1
    K_INT4 = 2
    K_INT8 = 3
    K_TEXT = 4
    K_UUID = 5

cdef Py_ssize_t MAX_FIELD = 0x7FFFFFFF
cdef Py_ssize_t FIRST_CAPACITY = 65536


cdef struct Buffer:
    char* data
    Py_ssize_t length
    Py_ssize_t capacity


cdef inline int reserve(Buffer* buf, Py_ssize_t extra) except -1:
    """Room for ``extra`` more bytes."""
    if extra <= buf.capacity - buf.length:
        return 0
    return grow(buf, extra)


cdef int grow(Buffer* buf, Py_ssize_t extra) except -1:
    """Double the buffer until ``extra`` more bytes fit (refusing a size past Py_ssize_t)."""
    cdef Py_ssize_t needed, capacity
    cdef char* grown
    if extra > PY_SSIZE_T_MAX - buf.length:
        raise MemoryError()
    needed = buf.length + extra
    capacity = buf.capacity if buf.capacity > 0 else FIRST_CAPACITY
    while capacity < needed:
        capacity = capacity * 2 if capacity <= PY_SSIZE_T_MAX // 2 else needed
    grown = <char*>realloc(buf.data, capacity)
    if grown == NULL:
        raise MemoryError()
    buf.data = grown
    buf.capacity = capacity
    return 0


cdef inline void put16(Buffer* buf, uint16_t v):
    cdef uint8_t* p = <uint8_t*>(buf.data + buf.length)
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v
    buf.length += 2


cdef inline void put32(Buffer* buf, uint32_t v):
    cdef uint8_t* p = <uint8_t*>(buf.data + buf.length)
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v
    buf.length += 4


cdef inline void put64(Buffer* buf, uint64_t v):
    put32(buf, <uint32_t>(v >> 32))
    put32(buf, <uint32_t>v)


cdef int put_bytes(Buffer* buf, const char* data, Py_ssize_t size) except -1:
    reserve(buf, size)
    memcpy(buf.data + buf.length, data, size)
    buf.length += size
    return 0


cdef long long integer(object value, int kind) except? -1:
    """An int column's value as asyncpg takes it (copybin.integer), range-checked."""
    cdef long long number = 0
    cdef bint overflow = False
    try:
        if not PyLong_Check(value) and hasattr(type(value), "__int__"):
            value = int(value)
        number = PyLong_AsLongLong(value)
    except OverflowError:
        overflow = True
    if kind == K_INT2:
        if overflow or number < -32768 or number > 32767:
            raise OverflowError("value out of int16 range")
    elif kind == K_INT4:
        if overflow or number < -2147483648 or number > 2147483647:
            raise OverflowError("value out of int32 range")
    elif overflow:
        raise OverflowError("value out of int64 range")
    return number


cdef int put_text(Buffer* buf, object value) except -1:
    """A text field: the str's UTF-8 bytes, refusing NUL. An ASCII str's own bytes; a Latin-1
    one (one byte per character: most accented text) encoded here; any other by CPython."""
    cdef const char* data
    cdef Py_ssize_t size
    if not PyUnicode_Check(value):
        raise TypeError(f"expected str, got {type(value).__name__}")
    PyUnicode_READY(value)
    if PyUnicode_IS_ASCII(value):
        data = <const char*>PyUnicode_DATA(value)
        size = PyUnicode_GET_LENGTH(value)
    elif PyUnicode_KIND(value) == PyUnicode_1BYTE_KIND:
        return put_latin1(buf, <const uint8_t*>PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value))
    else:
        data = PyUnicode_AsUTF8AndSize(value, &size)  # a surrogate: UnicodeEncodeError
    if size > MAX_FIELD:
        raise ValueError("string too long")
    if size and memchr(data, 0, size) != NULL:
        raise nul_refused()
    reserve(buf, 4 + size)
    put32(buf, <uint32_t>size)
    memcpy(buf.data + buf.length, data, size)
    buf.length += size
    return 0


cdef int put_latin1(Buffer* buf, const uint8_t* chars, Py_ssize_t count) except -1:
    """A text field of Latin-1 characters: one UTF-8 byte below U+0080, two from there."""
    cdef Py_ssize_t i, size = count
    cdef uint8_t c
    cdef uint8_t* out
    for i in range(count):
        size += chars[i] >> 7
    if size > MAX_FIELD:
        raise ValueError("string too long")
    if count and memchr(chars, 0, count) != NULL:
        raise nul_refused()
    reserve(buf, 4 + size)
    put32(buf, <uint32_t>size)
    out = <uint8_t*>(buf.data + buf.length)
    for i in range(count):
        c = chars[i]
        if c < 0x80:
            out[0] = c
            out += 1
        else:
            out[0] = 0xC0 | (c >> 6)
            out[1] = 0x80 | (c & 0x3F)
            out += 2
    buf.length += size
    return 0


cdef class _Uuids:
    """The last uuid's bytes: a batch's rows carry the same job id."""
    cdef object last
    cdef bytes raw

    cdef bytes of(self, object value):
        if value is not self.last:
            self.raw = uuid_bytes(value)
            self.last = value
        return self.raw


cdef int put_field(Buffer* buf, object value, int kind, _Uuids uuids) except -1:
    """One field of ``kind`` (None: NULL, whatever the kind)."""
    cdef long long number
    cdef bytes raw
    if value is None:
        reserve(buf, 4)
        put32(buf, 0xFFFFFFFF)
    elif kind == K_TEXT:
        put_text(buf, value)
    elif kind == K_UUID:
        raw = uuids.of(value)
        reserve(buf, 20)
        put32(buf, 16)
        memcpy(buf.data + buf.length, PyBytes_AS_STRING(raw), 16)
        buf.length += 16
    else:
        number = integer(value, kind)
        reserve(buf, 12)
        if kind == K_INT2:
            put32(buf, 2)
            put16(buf, <uint16_t>number)
        elif kind == K_INT4:
            put32(buf, 4)
            put32(buf, <uint32_t>number)
        else:
            put32(buf, 8)
            put64(buf, <uint64_t>number)
    return 0


cdef int put_row(Buffer* buf, tuple row, int* kinds, Py_ssize_t width, _Uuids uuids) except -1:
    cdef Py_ssize_t j
    if len(row) != width:
        raise ValueError(f"a row of {len(row)} values for {width} columns")
    reserve(buf, 2)
    put16(buf, <uint16_t>width)
    for j in range(width):
        put_field(buf, row[j], kinds[j], uuids)
    return 0


def encode(kinds, rows):
    """The binary COPY payload of ``rows`` (copybin.encode's bytes and errors)."""
    cdef Buffer buf
    cdef int* columns = NULL
    cdef Py_ssize_t width, j
    cdef _Uuids uuids = _Uuids()
    cdef bytes header = HEADER
    checked = tuple(Kind(k) for k in kinds)
    width = len(checked)
    if not 0 < width <= MAX_COLUMNS:
        raise ValueError(f"a COPY of {width} columns")
    buf.data = NULL
    buf.length = 0
    buf.capacity = 0
    columns = <int*>malloc(width * sizeof(int))
    if columns == NULL:
        raise MemoryError()
    try:
        for j in range(width):
            columns[j] = <int>checked[j]
        put_bytes(&buf, PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header))
        for row in rows:
            put_row(&buf, row if type(row) is tuple else tuple(row), columns, width, uuids)
        reserve(&buf, 2)
        put16(&buf, 0xFFFF)
        return PyByteArray_FromStringAndSize(buf.data, buf.length)
    finally:
        free(columns)
        free(buf.data)


# --- a batch plan's payloads, straight from its folds (copybin.encode_plan's bytes and errors) -

cdef inline void start_row(Buffer* buf, uint16_t width) except *:
    reserve(buf, 2)
    put16(buf, width)


cdef bytearray finished(Buffer* buf):
    reserve(buf, 2)
    put16(buf, 0xFFFF)
    return PyByteArray_FromStringAndSize(buf.data, buf.length)


cdef int put_detail(Buffer* buf, object cid, object client, object d, _Uuids uuids) except -1:
    """A contact_details row: (contact_id, client_id, channel_id, value, country_code, country)."""
    start_row(buf, 6)
    put_field(buf, cid, K_INT8, uuids)
    put_field(buf, client, K_INT4, uuids)
    put_field(buf, d.channel, K_INT2, uuids)
    put_field(buf, d.value, K_TEXT, uuids)
    put_field(buf, d.country_code, K_INT4, uuids)
    put_field(buf, d.country, K_TEXT, uuids)
    return 0


cdef int put_custom(Buffer* buf, object cid, object client, object field_id, object value,
                    _Uuids uuids) except -1:
    """A contact_custom_fields row: (contact_id, client_id, custom_field_id, value)."""
    start_row(buf, 4)
    put_field(buf, cid, K_INT8, uuids)
    put_field(buf, client, K_INT4, uuids)
    put_field(buf, field_id, K_INT4, uuids)
    put_field(buf, value, K_TEXT, uuids)
    return 0


cdef object lower_of(dict lowers, object name):
    """``name.lower()``, once per distinct name of the call (a file's rows share their header)."""
    cdef object lower = lowers.get(name)
    if lower is None:
        lower = name.lower()
        lowers[name] = lower
    return lower


cdef bint single(object row, dict lowers, dict field_ids) except -1:
    """Whether a key's only row can stand for its fold as it is: no two of its details with the
    same (channel, value), no two of its custom names with the same lower case (else the row is
    folded by ``merged``, which keeps one of each). Looks every custom name's id up."""
    cdef tuple details = row.details
    cdef tuple customs = row.custom_fields
    cdef Py_ssize_t i, j, n = len(details), m = len(customs)
    cdef list names
    for i in range(1, n):
        for j in range(i):
            if details[i].channel == details[j].channel and details[i].value == details[j].value:
                return False
    if m == 0:
        return True
    names = [lower_of(lowers, pair[0]) for pair in customs]
    for i in range(m):
        field_ids[names[i]]
        for j in range(i):
            if names[i] == names[j]:
                return False
    return True


def encode_plan(plan, ids, client, job_id, dict field_ids):
    """The payloads of contact, contact_details and contact_custom_fields for ``plan``: the bytes
    of ``copybin.encode_plan`` (which builds the rows as tuples, then encodes them), without the
    tuples. A new contact is a ContactRow (a key's only row) or a MergedContact."""
    cdef Buffer buf
    cdef _Uuids uuids = _Uuids()
    cdef bytes header = HEADER
    cdef dict lowers = {}
    cdef list entries = list(plan.new_contacts)
    cdef list id_list = list(ids)
    cdef list folds = []
    cdef Py_ssize_t i, n = len(entries)
    cdef object entry, cid, d, pair
    cdef tuple payloads
    cdef bint cpf_keys = plan.cpf_keys
    if len(id_list) != n:
        raise ValueError(f"{len(id_list)} ids for {n} new contacts")
    # The lookups first, in plan_rows's order: a missing custom field id raises before any byte.
    for cid, name, value in plan.custom_inserts:
        field_ids[lower_of(lowers, name)]
    for entry in entries:
        if type(entry) is ContactRow and single(entry, lowers, field_ids):
            folds.append(entry)
        else:
            entry = merged(entry)
            for lower in entry.custom_fields:
                field_ids[lower]
            folds.append(entry)
    buf.data = NULL
    buf.length = 0
    buf.capacity = 0
    try:
        put_bytes(&buf, PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header))
        for i in range(n):
            entry = folds[i]
            start_row(&buf, 6)
            put_field(&buf, id_list[i], K_INT8, uuids)
            put_field(&buf, client, K_INT4, uuids)
            if not cpf_keys:  # a channel key (core.keys): no CPF/CNPJ
                put_field(&buf, None, K_TEXT, uuids)
            elif type(entry) is ContactRow:
                put_field(&buf, entry.cpf_cnpj, K_TEXT, uuids)
            else:
                put_field(&buf, entry.key, K_TEXT, uuids)
            put_field(&buf, entry.name, K_TEXT, uuids)
            put_field(&buf, entry.street_address, K_TEXT, uuids)
            put_field(&buf, job_id, K_UUID, uuids)
        contacts = finished(&buf)

        buf.length = 0
        put_bytes(&buf, PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header))
        for cid, d in plan.detail_inserts:
            put_detail(&buf, cid, client, d, uuids)
        for i in range(n):
            entry = folds[i]
            cid = id_list[i]
            for d in (entry.details if type(entry) is ContactRow else entry.details.values()):
                put_detail(&buf, cid, client, d, uuids)
        details = finished(&buf)

        buf.length = 0
        put_bytes(&buf, PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header))
        for cid, name, value in plan.custom_inserts:
            put_custom(&buf, cid, client, field_ids[lower_of(lowers, name)], value, uuids)
        for i in range(n):
            entry = folds[i]
            cid = id_list[i]
            if type(entry) is ContactRow:
                for pair in entry.custom_fields:
                    put_custom(
                        &buf, cid, client, field_ids[lower_of(lowers, pair[0])], pair[1], uuids
                    )
            else:
                for lower, pair in entry.custom_fields.items():
                    put_custom(&buf, cid, client, field_ids[lower], pair[1], uuids)
        customs = finished(&buf)
        return contacts, details, customs
    finally:
        free(buf.data)

# cython: language_level=3
"""The compiled CSV reader: :class:`FastCsvReader`, records identical to ``CsvReader``'s.

``csvfile.CsvReader`` stays the specification. This subclass replaces only its per-record work
(``_consume``): the record boundaries and the field spans of the held text + the new text are
found in C on the str's own buffer (1, 2 or 4 bytes a character), in a ``nogil`` section, by the
state machine of Python's csv module (a quote opens a field only at its start, "" inside quotes,
after the closing quote the field goes on unquoted, CRLF / LF / CR end a record); the field strs
and the records are then made with the GIL. The rare paths stay the pure ones, inherited: the
skip of a record over the cap (``_skip_to_end``, ``_compress``, ``_hold``) and the check of a
suspect or long record (``_problem``).

Memory: the spans of at most ``_RECORDS`` records and ``_FIELDS`` fields are held at a time, a
fixed size; a record with more fields than that (rare: a wide sheet, or a hostile one) and those
after it in the text are left to the pure reader.
"""

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_KIND, PyUnicode_Substring
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from importer.read.csvfile import CsvReader, _is_blank
from importer.read.records import RAW_CHARS, RawRecord
from importer.read.text import display

cdef extern from "Python.h":
    ctypedef unsigned char Py_UCS1
    ctypedef unsigned short Py_UCS2
    bint PyUnicode_IS_ASCII(object o)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    ctypedef PyObject* (*allocfunc)(PyTypeObject*, Py_ssize_t)
    ctypedef struct _Type "PyTypeObject":
        allocfunc tp_alloc

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
    int T_OBJECT_EX

cdef extern from "descrobject.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

ctypedef fused char_t:
    Py_UCS1
    Py_UCS2
    Py_UCS4

cdef enum:
    _RECORDS = 4096  # records scanned per nogil section
    _FIELDS = 16384  # fields scanned per nogil section
    # _record's answers other than a record's end
    _INCOMPLETE = -1  # the text ends inside the record (it is held for the next block)
    _FULL = -2  # the field array is full: emit what is scanned, then go on
    _WIDE = -3  # the record alone has more fields than the array holds

cdef Py_UCS4 _QUOTE = 0x22, _CR = 0x0D, _LF = 0x0A

# Byte counting of a decoded text, as Decoder.byte_len counts (an escaped byte counts one)
cdef enum:
    _SINGLE = 1
    _UTF8 = 8
    _UTF16 = 16
    _UTF32 = 32


cdef struct Rec:
    Py_ssize_t start  # where its text starts in buf
    Py_ssize_t end  # where it ends (after its line break)
    Py_ssize_t content  # where its content ends (before its line break)
    Py_ssize_t field  # its first field in Scan.fields
    Py_ssize_t nfields
    Py_ssize_t breaks  # line breaks in its text, as csvfile.line_breaks counts them
    Py_ssize_t nbytes  # bytes of input its text came from
    unsigned int bits  # its characters OR-ed: < 0x80 when ASCII, < 0x100 when Latin-1...


cdef struct Field:
    # The field is buf[a:b] (with "" read as " when pairs) followed by buf[c:d] (what follows
    # a closing quote); an unquoted field is buf[a:b], c == d.
    Py_ssize_t a
    Py_ssize_t b
    Py_ssize_t c
    Py_ssize_t d
    bint pairs
    unsigned int bits  # the field's characters OR-ed (which str kind holds it)


cdef struct Scan:
    Rec* recs
    Py_ssize_t nrec
    Field* fields
    Py_ssize_t nfield


# --- the scan (no GIL) ------------------------------------------------------------------------


cdef inline bint _add_field(
    Scan* s, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d, bint pairs, unsigned int bits
) noexcept nogil:
    """Append a field; False when the array is full."""
    cdef Field* f
    if s.nfield == _FIELDS:
        return False
    f = &s.fields[s.nfield]
    f.a, f.b, f.c, f.d, f.pairs, f.bits = a, b, c, d, pairs, bits
    s.nfield += 1
    return True


cdef inline bint _ends_field(Py_UCS4 ch, Py_UCS4 delimiter) noexcept nogil:
    return ch == delimiter or ch == _CR or ch == _LF


cdef Py_ssize_t _record(
    const char_t* data, Py_ssize_t n, Py_ssize_t start, bint final, Py_UCS4 delimiter, Scan* s
) noexcept nogil:
    """Scan the record at start into s: its end, or _INCOMPLETE, _FULL or _WIDE.

    When final, a record running to the end of the text is the last one, without a line break.
    """
    cdef Py_ssize_t p = start, first = s.nfield, breaks = 0, a, b, c
    cdef Py_UCS4 ch
    cdef unsigned int bits, all_bits = 0
    cdef bint pairs
    cdef Rec* r
    if start >= n:
        return _INCOMPLETE
    while True:
        pairs = False
        bits = 0
        if p < n and data[p] == _QUOTE:  # a quoted field, up to its closing quote
            p += 1
            a = p
            while True:
                while p < n and data[p] != _QUOTE:
                    ch = data[p]
                    bits |= <unsigned int>ch
                    if ch == _CR or (ch == _LF and data[p - 1] != _CR):
                        breaks += 1
                    p += 1
                if p + 1 < n and data[p + 1] == _QUOTE:
                    pairs = True  # "" is a quote
                    p += 2
                else:
                    break
            b = p  # the closing quote, or the end of the text inside the quotes
            if p < n:
                p += 1
            c = p  # the field goes on unquoted after its closing quote
            while p < n and not _ends_field(data[p], delimiter):
                bits |= <unsigned int>data[p]
                p += 1
        else:
            a = p
            while p < n and not _ends_field(data[p], delimiter):
                bits |= <unsigned int>data[p]
                p += 1
            b = c = p
        all_bits |= bits
        if not _add_field(s, a, b, c, p, pairs, bits):
            s.nfield = first
            return _FULL if s.nrec > 0 else _WIDE
        if p == n:
            if not final:
                s.nfield = first
                return _INCOMPLETE
            c = n  # the last record, without a line break
            break
        ch = data[p]
        if ch == delimiter:
            all_bits |= <unsigned int>ch
            p += 1
            continue
        c = p  # the content ends at the line break
        if ch == _CR and p + 1 < n and data[p + 1] == _LF:
            p += 1
        elif ch == _CR and p + 1 == n and not final:
            s.nfield = first  # an LF may follow in the next block
            return _INCOMPLETE
        p += 1
        breaks += 1
        break
    r = &s.recs[s.nrec]
    r.start, r.end, r.content, r.field = start, p, c, first
    r.nfields, r.breaks, r.bits = s.nfield - first, breaks, all_bits
    s.nrec += 1
    return p


cdef Py_ssize_t _bytes_of(
    const char_t* data, Py_ssize_t start, Py_ssize_t end, int mode
) noexcept nogil:
    """The input bytes text data[start:end] (not ASCII) came from, as Decoder.byte_len counts."""
    cdef Py_ssize_t total = 0, i
    cdef Py_UCS4 ch
    if mode == _SINGLE:
        return end - start
    for i in range(start, end):
        ch = data[i]
        if 0xD800 <= ch <= 0xDFFF:
            total += 1  # an escaped byte
        elif mode == _UTF8:
            total += 1 if ch < 0x80 else 2 if ch < 0x800 else 3 if ch < 0x10000 else 4
        elif mode == _UTF16:
            total += 2 if ch < 0x10000 else 4
        else:
            total += 4
    return total


cdef Py_ssize_t _scan(
    const char_t* data,
    Py_ssize_t n,
    Py_ssize_t pos,
    bint final,
    Py_UCS4 delimiter,
    bint ascii,
    int width,
    int mode,
    Scan* s,
) noexcept nogil:
    """Scan up to _RECORDS records from pos into s (reset): where the next record starts, or
    _WIDE if that one is too wide for s (and s holds nothing)."""
    cdef Py_ssize_t end
    cdef Rec* r
    s.nrec = 0
    s.nfield = 0
    while s.nrec < _RECORDS:
        end = _record(data, n, pos, final, delimiter, s)
        if end < 0:
            if end == _WIDE:
                return _WIDE
            break
        r = &s.recs[s.nrec - 1]
        if ascii or r.bits < 0x80:
            r.nbytes = (end - pos) * width
        else:
            r.nbytes = _bytes_of(data, pos, end, mode)
        pos = end
    return pos


cdef Py_ssize_t _scan_buf(
    str buf, Py_ssize_t pos, bint final, Py_UCS4 delimiter, int width, int mode, Scan* s
) noexcept:
    """_scan on buf's own characters, without the GIL."""
    cdef int kind = PyUnicode_KIND(buf)
    cdef void* data = PyUnicode_DATA(buf)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(buf), end
    cdef bint ascii = PyUnicode_IS_ASCII(buf)
    with nogil:
        if kind == 1:
            end = _scan(<Py_UCS1*>data, n, pos, final, delimiter, ascii, width, mode, s)
        elif kind == 2:
            end = _scan(<Py_UCS2*>data, n, pos, final, delimiter, ascii, width, mode, s)
        else:
            end = _scan(<Py_UCS4*>data, n, pos, final, delimiter, ascii, width, mode, s)
    return end


# --- the records (with the GIL) -------------------------------------------------------------


# RawRecord is a frozen dataclass with slots: its __init__ sets six slots through
# object.__setattr__, most of a record's cost. _new_record fills the same slots directly (the
# same object); _SLOTS holds their offsets, or is empty when the class is not laid out so.
cdef Py_ssize_t _SLOTS[6]
cdef bint _DIRECT = False


cdef void _find_slots() except *:
    global _DIRECT
    names = ("line", "fields", "reason", "raw", "end_offset", "end_line")
    if tuple(RawRecord.__dataclass_fields__) != names:
        return
    member_type = type(RawRecord.__dict__["line"])
    for index, name in enumerate(names):
        descriptor = RawRecord.__dict__.get(name)
        if type(descriptor) is not member_type or member_type.__name__ != "member_descriptor":
            return
        member = (<PyMemberDescrObject*><PyObject*>descriptor).d_member
        if member.type != T_OBJECT_EX:
            return
        _SLOTS[index] = member.offset
    _DIRECT = True


_find_slots()
DIRECT_RECORDS = _DIRECT  # whether records are made by filling their slots (for the tests)


cdef inline void _set_slot(object record, Py_ssize_t offset, object value) noexcept:
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>record) + offset))[0] = <PyObject*>value


cdef object _new_record(
    object line, object fields, object reason, object raw, object offset, object end_line
):
    """RawRecord(line, fields, reason, raw, offset, end_line)."""
    cdef _Type* cls
    cdef PyObject* made
    if not _DIRECT:
        return RawRecord(line, fields, reason, raw, offset, end_line)
    cls = <_Type*><PyObject*>RawRecord
    made = cls.tp_alloc(<PyTypeObject*>cls, 0)  # a new reference, the slots NULL
    if made == NULL:
        raise MemoryError()
    record = <object>made
    Py_DECREF(record)  # the cast took a reference of its own
    _set_slot(record, _SLOTS[0], line)
    _set_slot(record, _SLOTS[1], fields)
    _set_slot(record, _SLOTS[2], reason)
    _set_slot(record, _SLOTS[3], raw)
    _set_slot(record, _SLOTS[4], offset)
    _set_slot(record, _SLOTS[5], end_line)
    return record


cdef str _span(str buf, Py_ssize_t a, Py_ssize_t b, unsigned int bits):
    """buf[a:b], whose characters OR-ed are bits: made at once in the right kind, without
    PyUnicode_Substring's search for the widest character."""
    cdef Py_ssize_t size = b - a, i
    cdef int kind = PyUnicode_KIND(buf), out_kind
    cdef const char* data
    cdef void* out
    if size <= 1:
        return PyUnicode_Substring(buf, a, b)  # the shared empty and one-character strs
    text = PyUnicode_New(
        size, 0x7F if bits < 0x80 else 0xFF if bits < 0x100 else 0xFFFF if bits < 0x10000 else 0x10FFFF
    )
    out_kind = PyUnicode_KIND(text)
    out = PyUnicode_DATA(text)
    data = <const char*>PyUnicode_DATA(buf) + a * kind
    if out_kind == kind:
        memcpy(out, data, size * kind)
    elif kind == 2:
        for i in range(size):
            (<Py_UCS1*>out)[i] = <Py_UCS1>(<const Py_UCS2*>data)[i]
    elif out_kind == 1:
        for i in range(size):
            (<Py_UCS1*>out)[i] = <Py_UCS1>(<const Py_UCS4*>data)[i]
    else:
        for i in range(size):
            (<Py_UCS2*>out)[i] = <Py_UCS2>(<const Py_UCS4*>data)[i]
    return text


cdef inline str _field(str buf, Field* f):
    cdef str text
    if not f.pairs and f.c == f.d:
        return _span(buf, f.a, f.b, f.bits)
    text = PyUnicode_Substring(buf, f.a, f.b)
    if f.pairs:
        text = text.replace('""', '"')
    if f.c < f.d:
        text = text + PyUnicode_Substring(buf, f.c, f.d)
    return text


cdef list _fields(str buf, Scan* s, Rec* r):
    cdef list fields = PyList_New(r.nfields)
    cdef Py_ssize_t k
    cdef str text
    for k in range(r.nfields):
        text = _field(buf, &s.fields[r.field + k])
        Py_INCREF(text)
        PyList_SET_ITEM(fields, k, text)  # steals the reference
    return fields


cdef tuple _emit(
    object reader,
    str buf,
    Scan* s,
    object line,
    Py_ssize_t offset,
    bint suspect,
    Py_ssize_t check_over,
    list out,
):
    """The records of s (CsvReader._emit's loop); the line and offset after them.

    line is an int object: a record's end line is the next one's start, the same object.
    """
    cdef Py_ssize_t i, count = line
    cdef Rec* r
    cdef list fields
    cdef str first, content, raw
    for i in range(s.nrec):
        r = &s.recs[i]
        start = line
        count += r.breaks if r.breaks > 1 else 1
        line = count
        offset += r.nbytes
        fields = _fields(buf, s, r)
        if suspect or r.end - r.start > check_over:  # (a long blank record is too long too)
            content = PyUnicode_Substring(buf, r.start, r.content)
            reason = reader._problem(content, fields)
            if reason is not None:
                out.append(_new_record(start, None, reason, display(content), offset, line))
                continue
        first = fields[0]
        if (not first or first[0].isspace()) and _is_blank(fields):
            continue
        if r.content - r.start <= RAW_CHARS:
            raw = _span(buf, r.start, r.content, r.bits)  # (r.bits: all of its characters)
        else:
            raw = PyUnicode_Substring(buf, r.start, r.start + RAW_CHARS)
        out.append(_new_record(start, fields, None, raw, offset, line))
    return line, offset


cdef int _mode(str encoding):
    if encoding == "utf-8":
        return _UTF8
    if encoding.startswith("utf-16"):
        return _UTF16
    if encoding.startswith("utf-32"):
        return _UTF32
    return _SINGLE


cdef Py_ssize_t _records(
    object reader,
    str buf,
    Py_ssize_t pos,
    bint final,
    bint suspect,
    list out,
    bint* tail,
    bint* wide,
) except -2:
    """Emit the records of buf from pos into out: where the record in progress starts. When
    final, the last one, without a line break, is emitted too (then *tail is set). *wide is
    set when the scan stopped at a record too wide for it (the pure reader goes on there)."""
    cdef Scan s
    cdef Py_UCS4 delimiter = ord(reader._delimiter)
    decoder = reader._decoder
    cdef int width = decoder.ascii_width, mode = _mode(decoder.encoding)
    line = reader._line
    cdef Py_ssize_t offset = reader._offset
    cdef Py_ssize_t check_over = reader._check_over
    cdef Rec* last
    s.recs = <Rec*>malloc(_RECORDS * sizeof(Rec))
    s.fields = <Field*>malloc(_FIELDS * sizeof(Field))
    if s.recs == NULL or s.fields == NULL:
        free(s.recs)
        free(s.fields)
        raise MemoryError()
    try:
        while True:
            end = _scan_buf(buf, pos, final, delimiter, width, mode, &s)
            if end == _WIDE:
                wide[0] = True
                break
            if s.nrec == 0:
                break
            line, offset = _emit(reader, buf, &s, line, offset, suspect, check_over, out)
            pos = end
            last = &s.recs[s.nrec - 1]
            tail[0] = last.content == last.end  # no line break
    finally:
        free(s.recs)
        free(s.fields)
        reader._line, reader._offset = line, offset
    return pos


class FastCsvReader(CsvReader):
    """CsvReader with its record loop compiled (see the module docstring)."""

    def _consume(self, str text, bint final):
        cdef str buf = self._buf + text if self._buf else text
        dirty = self._dirty or self._decoder.escaped
        cdef list out = []
        cdef Py_ssize_t pos = 0, end
        cdef bint tail = False, wide = False
        if self._skip is not None:
            pos = self._skip_to_end(buf, final, out)
            if pos < 0:
                return out
        suspect = dirty or buf.find("\x00", pos) >= 0
        end = _records(self, buf, pos, final, suspect, out, &tail, &wide)
        if wide:
            self._pure_rest(buf, end, final, out, suspect, dirty)
        elif not tail:  # (as CsvReader: after the last record without a line break, no hold)
            self._hold(buf[end:], dirty)
        return out

    def _pure_rest(self, buf, pos, final, out, suspect, dirty):
        """CsvReader._consume from pos on (where a record too wide for the scan starts)."""
        texts, quoted_fields, end = self._records(buf, pos, final)
        out += self._emit(texts, iter(quoted_fields), suspect=suspect)
        if final and end < len(buf):  # the last record, without a line break
            last = [buf[end:]]
            out += self._emit(last, iter(self._parse_quoted(last)), suspect=suspect, ends="")
        else:
            self._hold(buf[end:], dirty)

# cython: language_level=3
# distutils: language = c++
"""Compiled engine: the twin of :mod:`acp_fast._engine_py` (Cython over C++ with simdjson).

Same public names, constructor parameters, attributes and return shapes as the pure twin,
whose module docstring is the specification; for identical input (however it is chunked)
both produce identical frames. See ``csrc/`` for the C++ half:

* ``acp_parse`` -- per :class:`Decoder`, simdjson's stage 1 (run-time dispatched SIMD)
  indexes a line, then our own recursive descent over that index validates *every* value
  (so the whole line is validated in lazy mode too), records the envelope (kind, typed id,
  method, error) plus the byte spans of the id and of ``params``/``result``, and in eager
  mode builds the Python objects directly;
* ``acp_values`` -- numbers, strings (memchr-driven unescaping) and the small str cache that
  makes repeated keys and method names allocation-free;
* ``acp_encode`` -- the JSON encoder (json.dumps-compatible output, ``RawJson`` spliced);
* ``acp_forward`` -- the :class:`Forwarder`'s byte-level helpers: the successor-envelope
  scanner and the output buffer that becomes the ``bytes`` handed to the transport.

Buffers and lifetimes: ``feed`` parses lines in place inside the chunk's ``bytes`` object
when at least ``SIMDJSON_PADDING`` bytes follow the line there (such lines are indexed in
runs of up to 64 KiB by one stage 1 call: ``LineParser.index_region``), else it copies the
line into a reusable padded scratch buffer; a partial line waits in a padded carry buffer. A
frame never points into either buffer: it references the chunk's ``bytes`` object (zero
copy) or, for a line joined across chunks, a ``bytes`` object made for that line.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_SetItem
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject
from libc.string cimport memchr, memcmp, memcpy
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libc.stdint cimport int64_t
from cython.operator cimport dereference as deref, preincrement as inc
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.long cimport PyLong_AsLongLong
from cpython.unicode cimport PyUnicode_GET_LENGTH, PyUnicode_READ_CHAR

import sys
from typing import Union

from acp_fast.errors import (
    DEFAULT_MESSAGES,
    INVALID_REQUEST,
    PARSE_ERROR,
    DecoderClosedError,
    EncodeError,
    SendBufferFull,
)
from acp_fast._kinds import BATCH, MALFORMED, NOTIFICATION, REQUEST, RESPONSE
from acp_fast._kinds import check_batch_state, check_message_state
from acp_fast._rawjson import RawJson, set_decoder
from acp_fast.protocol._schema_names import PROPERTY_NAMES, STRING_CONSTANTS
from acp_fast.protocol.facts import FORWARD_CLAIMED_METHODS, PROXY_SUCCESSOR, PROXY_SUCCESSOR_SPEC, SUCCESSOR_METHODS
from acp_fast._strictjson import MAX_DEPTH_LIMIT, InvalidJson

__all__ = [
    "IMPLEMENTATION",
    "COMPILED",
    "REQUEST",
    "NOTIFICATION",
    "RESPONSE",
    "BATCH",
    "MALFORMED",
    "DEFAULT_MAX_LINE_SIZE",
    "DEFAULT_MAX_DEPTH",
    "MAX_DEPTH_LIMIT",
    "DEFAULT_MAX_BATCH_SIZE",
    "RawJson",
    "Message",
    "Batch",
    "Malformed",
    "Frame",
    "Decoder",
    "LineSplitter",
    "encode_request",
    "encode_notification",
    "encode_result",
    "encode_error",
    "encode_batch",
    "encode_value",
    "forward",
    "BatchReply",
    "error_reply",
    "Forwarder",
    "Outbox",
    "DEFAULT_MAX_WRITE_BUFFER",
    "DEFAULT_FLUSH_AT",
]

IMPLEMENTATION = "c"
#: capability flag: this twin is compiled (its encoders splice a `RawJson` inside a dict in one copy)
COMPILED = True

DEFAULT_MAX_LINE_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 128
DEFAULT_MAX_BATCH_SIZE = 1024
DEFAULT_MAX_PENDING = 65536
DEFAULT_MAX_WRITE_BUFFER = 8 * 1024 * 1024
DEFAULT_FLUSH_AT = 256 * 1024

# Most bytes one stage 1 run indexes (Decoder.feed): enough to amortise its fixed cost, small
# enough that the index stays in cache.
cdef Py_ssize_t _RUN_MAX = 64 * 1024
# Joined lines at least this long get their bytes from the decoder's spare block, and those
# at most _RECYCLE_KEEP long become the next spare (Decoder._buffered_line): large frames
# reuse one block instead of a fresh one each (no page-fault churn; see recycled_bytes).
cdef Py_ssize_t _RECYCLE_MIN = 64 * 1024
cdef Py_ssize_t _RECYCLE_KEEP = 4 * 1024 * 1024


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc
    ctypedef struct _TypeWithDict "PyTypeObject":
        PyObject* tp_dict
        Py_ssize_t tp_basicsize
    object PyDescr_NewMember(PyTypeObject* type, PyMemberDef* member)
    void PyType_Modified(PyTypeObject* type)


cdef extern from "structmember.h":
    enum:
        T_OBJECT_EX


cdef extern from "acp_common.h" namespace "acp_fast":
    enum:
        KIND_REQUEST
        KIND_NOTIFICATION
        KIND_RESPONSE
        KIND_BATCH
        KIND_MALFORMED
        KIND_SKIP
    enum:
        REASON_INVALID_JSON
        REASON_INVALID_UTF8
        REASON_BATCH_TOO_LARGE
    const size_t ACP_PADDING
    const char* last_newline(const char* p, size_t n)
    object recycled_bytes(PyObject*& spare, const char* src, Py_ssize_t n, Py_ssize_t keep)
    bint has_bytes_layout(PyTypeObject* type)
    object new_bytes_like(PyTypeObject* type, const char* src, Py_ssize_t n)

    cdef cppclass PaddedBuffer:
        PaddedBuffer(size_t pad)
        char* data()
        size_t size()
        bint reserve(size_t n)
        bint append(const char* p, size_t n)
        bint assign(const char* p, size_t n)
        void clear()


cdef extern from "acp_parse.h" namespace "acp_fast":
    cdef cppclass Entry:
        int kind
        int reason
        bint response_shaped
        PyObject* id
        PyObject* method
        PyObject* error
        PyObject* value
        Py_ssize_t start, end, ids, ide, ps, pe

    object take_or_none(PyObject*& slot)

    cdef cppclass LineParser:
        LineParser() except +
        bint ok()
        void set_max_batch(size_t n)
        int parse(const char* p, size_t n, bint lazy, int max_depth) except -1
        int index_region(const char* p, size_t n) except -1
        int parse_in_region(size_t off, size_t n, bint lazy, int max_depth) except -1
        Py_ssize_t origin
        object decode(const char* p, size_t n)
        void release()
        Entry top
        vector[Entry] entries
        char* scratch(size_t n)
        const char* implementation_name()

    const char* active_simdjson_implementation()
    void clear_string_caches()


cdef extern from "acp_values.h" namespace "acp_fast":
    int pin_str(object u) except -1
    object pinned_strs()


cdef extern from "acp_encode.h" namespace "acp_fast":
    cdef cppclass Writer:
        Writer()
        void reset()
        void reset(size_t keep)
        size_t size()
        const char* data()
        int put(const char* s, size_t n) except -1
        int put_char(char c) except -1
        object to_bytes()

    void encode_init(object rawjson_type, object encode_error)
    int write_value(Writer& w, object obj) except -1
    int write_str(Writer& w, object s) except -1
    int write_int64(Writer& w, long long v) except -1
    int check_raw(object raw) except -1


encode_init(RawJson, EncodeError)

_REASONS = (
    None,
    "invalid UTF-8",
    "invalid JSON",
    "not an object",
    "empty batch",
    "duplicate envelope key",
    "invalid jsonrpc version",
    "invalid envelope",
    "invalid method",
    "invalid id",
    "invalid params",
    "invalid error object",
    None,  # REASON_BATCH_TOO_LARGE: the text names the decoder's limit
)

cdef object _UNSET = object()   # payload not decoded yet (lazy)
cdef object _KEEP = object()    # forward(): keep the message's own id
cdef object _NO_DATA = object()  # encode_error(): no data member
cdef object _RawJson = RawJson
# Verbatim spans become RawJson in one allocation and one copy (new_bytes_like), which needs
# bytes' own instance layout: RawJson must keep ``__slots__ = ()``.
if not has_bytes_layout(<PyTypeObject*>RawJson):
    raise ImportError("RawJson must be a bytes subclass with bytes' layout (__slots__ = ())")
cdef object _EncodeError = EncodeError
cdef object _PARSE_ERROR = PARSE_ERROR
cdef object _INVALID_REQUEST = INVALID_REQUEST
cdef tuple _REASON_STRS = _REASONS
cdef object _DEFAULT_MESSAGES = DEFAULT_MESSAGES

# One parser for decoding lazy payloads on first access and RawJson.decode_json (the GIL
# serialises its use). Its batch limit is 0: validating a RawJson array builds no entries.
cdef LineParser* _payload_parser = new LineParser()
_payload_parser.set_max_batch(0)


def _decode_json(data):
    """RawJson.decode_json for the compiled twin: validate, then decode (no pure-twin code).

    Nesting is bounded by MAX_DEPTH_LIMIT; raises InvalidJson (a ValueError) like the strict
    reader does.
    """
    cdef bytes b = bytes(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    cdef char* copy = _payload_parser.scratch(<size_t>n)
    if copy == NULL:
        raise MemoryError()
    memcpy(copy, PyBytes_AS_STRING(b), <size_t>n)
    _payload_parser.parse(copy, <size_t>n, True, MAX_DEPTH_LIMIT)
    cdef int kind = _payload_parser.top.kind
    cdef int reason = _payload_parser.top.reason
    _payload_parser.release()
    if kind == KIND_SKIP or (kind == KIND_MALFORMED and (
            reason == REASON_INVALID_JSON or reason == REASON_INVALID_UTF8)):
        raise InvalidJson("invalid JSON")
    return _payload_parser.decode(PyBytes_AS_STRING(b), <size_t>n)


set_decoder(_decode_json)


def _simdjson_implementation():
    """(walker implementation, simdjson's active stage-1 implementation): diagnostics."""
    return (_payload_parser.implementation_name().decode(),
            active_simdjson_implementation().decode())


def _clear_caches():
    """Drop the decoder's string cache (tests); the pinned names stay."""
    clear_string_caches()


def _pinned_names():
    """The strs pinned in the decoder's string cache (tests), in no particular order."""
    return pinned_strs()


cdef int _pin_schema_names() except -1:
    """Pin the ACP schemas' property names and tag strings, interned, in the string cache.

    A fixed set, taken once from the generated schema data: a peer's fresh keys only ever
    go through the bounded cache, never into this table or the interpreter's interned
    strings. ``sys.intern`` (``PyUnicode_InternInPlace``) is safe on every supported
    CPython: the strings live as long as the process anyway (3.12 makes interned strings
    immortal; the set is bounded). A key the decoder makes is then the very object a
    handler's literal ``"text"`` is (code constants that look like names are interned).
    """
    for name in PROPERTY_NAMES + STRING_CONSTANTS:
        pin_str(sys.intern(name))
    return 0


_pin_schema_names()


# ---------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------

_KIND_NAMES = {REQUEST: "request", NOTIFICATION: "notification", RESPONSE: "response"}
cdef tuple _KIND_OBJS = (REQUEST, NOTIFICATION, RESPONSE)


cdef inline object _raw_json(object line, Py_ssize_t start, Py_ssize_t end):
    """``RawJson(line[start:end])`` made with one copy (see new_bytes_like in acp_common.h)."""
    return new_bytes_like(<PyTypeObject*>_RawJson, PyBytes_AS_STRING(line) + start, end - start)


@cython.freelist(256)
cdef class Message:
    """One valid JSON-RPC message: a request, a notification or a response.

    Attributes:
        kind: :data:`REQUEST`, :data:`NOTIFICATION` or :data:`RESPONSE`.
        id: the typed id (``int``, ``str`` or ``None``); ``1`` and ``"1"`` differ. ``None``
            for notifications and for ``"id": null``.
        method: the method name (``None`` for responses).
        error: the decoded error object of an error response, else ``None``.

    ``params`` (calls) and ``result`` (success responses) are decoded on first access in
    lazy mode and cached; ``params_raw``/``result_raw``/``raw`` give the verbatim bytes as
    :class:`RawJson` without decoding anything.
    """

    # kind/id/method/error are plain slots exposed by _install_members() (below the class).
    cdef object kind
    cdef object id
    cdef object method
    cdef object error
    # Spans are byte offsets into _line (the chunk or line the message came in); _ids is -1
    # without an id key, _ps -1 without a payload (params absent or null; error responses).
    cdef object _line
    cdef Py_ssize_t _start, _end, _ids, _ide, _ps, _pe
    cdef object _value

    def __init__(self, *args, **kwargs):
        raise TypeError("Message values are made by a Decoder (Decoder.feed), not constructed")

    cdef inline int _check(self) except -1:
        # A Message made with Message.__new__ from Python has no line: refuse it rather than
        # read through its spans. (Decoders and _restore_message always set a valid state.)
        if self._line is None:
            raise ValueError("Message was not made by a Decoder")
        return 0

    def __repr__(self):
        kind = _slot(<PyObject*>self.kind, "kind")
        parts = [_KIND_NAMES[kind]]
        if kind != NOTIFICATION:
            parts.append(f"id={_slot(<PyObject*>self.id, 'id')!r}")
        method = _slot(<PyObject*>self.method, "method")
        if method is not None:
            parts.append(f"method={method!r}")
        error = _slot(<PyObject*>self.error, "error")
        if error is not None:
            parts.append(f"error={error!r}")
        return f"<Message {' '.join(parts)}>"

    def __reduce__(self):
        # Written out because Cython's automatic pickling reads every field directly (a
        # deleted member slot is NULL) and would pickle the _UNSET marker by value.
        self._check()
        unset = self._value is _UNSET
        return (_restore_message, (
            _slot(<PyObject*>self.kind, "kind"), _slot(<PyObject*>self.id, "id"),
            _slot(<PyObject*>self.method, "method"), _slot(<PyObject*>self.error, "error"),
            self._line, self._start, self._end, self._ids, self._ide, self._ps, self._pe,
            None if unset else self._value, unset))

    cdef inline bint _is_response(self) except -1:
        return _slot(<PyObject*>self.kind, "kind") == KIND_RESPONSE

    cdef object _payload(self):
        cdef object value = self._value
        if value is _UNSET:
            self._check()
            if self._ps < 0:
                value = None
            else:
                value = _payload_parser.decode(PyBytes_AS_STRING(self._line) + self._ps,
                                               <size_t>(self._pe - self._ps))
            self._value = value
        return value

    cdef object _payload_raw(self):
        if self._ps < 0:
            return None
        self._check()
        return _raw_json(self._line, self._ps, self._pe)

    @property
    def params(self):
        """Decoded ``params`` (``None`` when absent or null, and for responses)."""
        if self._is_response():
            return None
        return self._payload()

    @property
    def result(self):
        """Decoded ``result`` of a success response (``None`` otherwise)."""
        if not self._is_response():
            return None
        return self._payload()

    @property
    def params_raw(self):
        """Verbatim ``params`` bytes (``None`` when absent or null, and for responses)."""
        if self._is_response():
            return None
        return self._payload_raw()

    @property
    def result_raw(self):
        """Verbatim ``result`` bytes of a success response (``None`` otherwise)."""
        if not self._is_response():
            return None
        return self._payload_raw()

    @property
    def raw(self):
        """The message exactly as received (without the line terminator)."""
        self._check()
        return _raw_json(self._line, self._start, self._end)

    @property
    def is_error(self):
        """True for an error response."""
        return _slot(<PyObject*>self.error, "error") is not None


def _restore_message(kind, id, method, error, line, start, end, ids, ide, ps, pe, value,
                     unset):
    """Unpickle a Message (see Message.__reduce__); refuses state no decoder makes."""
    check_message_state(kind, id, method, error, line, start, end, ids, ide, ps, pe)
    cdef Message m = Message.__new__(Message)
    m.kind, m.id, m.method, m.error = kind, id, method, error
    m._line = line
    m._start, m._end, m._ids, m._ide, m._ps, m._pe = start, end, ids, ide, ps, pe
    m._value = _UNSET if unset else value
    return m


cdef inline object _slot(PyObject* value, str name):
    """A member slot's value; AttributeError once it was deleted (like a __slots__ slot)."""
    if value == NULL:
        raise AttributeError(name)
    return <object>value


cdef PyMemberDef _MESSAGE_MEMBERS[4]


cdef int _install_members() except -1:
    """Expose Message.kind/id/method/error as member descriptors (T_OBJECT_EX slots).

    Strategy: routing code reads these on every frame. CPython 3.11+ specialises attribute
    reads of ``__slots__``-style member descriptors (LOAD_ATTR_SLOT: a type-version check and
    a load) but not of the getset properties Cython generates for ``cdef public`` fields, which
    go through the generic lookup and a C getter call each time. Like the pure twin's
    ``__slots__``, the slots are writable and deletable; the C code reading them goes through
    _slot(), which checks for a deleted (NULL) slot.
    """
    cdef Message probe = Message.__new__(Message)
    cdef char* base = <char*><PyObject*>probe
    cdef PyObject* tdict = (<_TypeWithDict*>Message).tp_dict
    names = (b"kind", b"id", b"method", b"error")
    docs = (
        b"REQUEST, NOTIFICATION or RESPONSE.",
        b"The typed id (int, str or None); None for notifications and for \"id\": null.",
        b"The method name (None for responses).",
        b"The decoded error object of an error response, else None.",
    )
    # Cython has no offsetof() for object fields: find each one by a unique value put in it.
    marks = (object(), object(), object(), object())
    probe.kind, probe.id, probe.method, probe.error = marks
    cdef PyObject** words = <PyObject**>base
    cdef Py_ssize_t j, nwords = (<_TypeWithDict*>Message).tp_basicsize // sizeof(PyObject*)
    offsets = [-1, -1, -1, -1]
    cdef int i
    for j in range(nwords):
        for i in range(4):
            if words[j] == <PyObject*>marks[i]:
                offsets[i] = j * <Py_ssize_t>sizeof(PyObject*)
    if -1 in offsets:
        raise ImportError("acp_fast._engine_c: Message slots not found")
    for i in range(4):
        _MESSAGE_MEMBERS[i].name = <const char*>PyBytes_AS_STRING(names[i])
        _MESSAGE_MEMBERS[i].type = T_OBJECT_EX
        _MESSAGE_MEMBERS[i].offset = offsets[i]
        _MESSAGE_MEMBERS[i].flags = 0
        _MESSAGE_MEMBERS[i].doc = <const char*>PyBytes_AS_STRING(docs[i])
        descr = PyDescr_NewMember(<PyTypeObject*>Message, &_MESSAGE_MEMBERS[i])
        if PyDict_SetItem(<object>tdict, names[i].decode(), descr) < 0:
            return -1
    _MEMBER_NAMES_KEEPALIVE.append((names, docs))
    PyType_Modified(<PyTypeObject*>Message)
    return 0


_MEMBER_NAMES_KEEPALIVE = []
_install_members()


@cython.freelist(16)
cdef class Batch:
    """A non-empty JSON-RPC batch (one JSON array on one line), boundary kept.

    ``entries`` holds one :class:`Message` or :class:`Malformed` per array element, in
    source order; ``raw`` is the whole line.
    """

    cdef public object entries
    cdef object _line
    cdef Py_ssize_t _start, _end

    kind = BATCH

    def __init__(self, *args, **kwargs):
        raise TypeError("Batch values are made by a Decoder (Decoder.feed), not constructed")

    def __reduce__(self):
        if self._line is None:
            raise ValueError("Batch was not made by a Decoder")
        return (_restore_batch, (self.entries, self._line, self._start, self._end))

    @property
    def raw(self):
        if self._line is None:
            raise ValueError("Batch was not made by a Decoder")
        return _raw_json(self._line, self._start, self._end)

    def __len__(self):
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __getitem__(self, i):
        return self.entries[i]

    def __repr__(self):
        return f"<Batch {self.entries!r}>"


@cython.freelist(64)
cdef class Malformed:
    """A line or batch entry that is not a valid message, kept as a value.

    Attributes:
        raw: the offending bytes (the line, or the entry's span inside a batch; empty for
            a line over ``max_line_size``, which is never buffered).
        code: the JSON-RPC code to answer with: -32700 (invalid JSON, including invalid
            UTF-8 and over-deep nesting) or -32600 (invalid envelope, empty batch, line
            too long).
        reason: a short fixed phrase naming the first rule that failed.
        response_shaped: True for an object without ``method`` that has ``result`` or
            ``error``: such a value must never be answered.
    """

    cdef public object raw
    cdef public object code
    cdef public object reason
    cdef public object response_shaped

    kind = MALFORMED

    def __init__(self, raw, code, reason, response_shaped=False):
        self.raw = raw
        self.code = code
        self.reason = reason
        self.response_shaped = response_shaped

    def __repr__(self):
        shaped = " response-shaped" if self.response_shaped else ""
        return f"<Malformed {self.code} {self.reason!r}{shaped} raw={self.raw[:60]!r}>"


Frame = Union[Message, Batch, Malformed]


def _restore_batch(entries, line, start, end):
    """Unpickle a Batch (see Batch.__reduce__); refuses state no decoder makes."""
    check_batch_state(entries, line, start, end, (Message, Malformed))
    cdef Batch b = Batch.__new__(Batch)
    b.entries = entries
    b._line = line
    b._start = start
    b._end = end
    return b


cdef inline Malformed _new_malformed(object raw, int reason, bint shaped):
    cdef Malformed m = Malformed.__new__(Malformed)
    m.raw = raw
    m.code = _PARSE_ERROR if (reason == REASON_INVALID_JSON or reason == REASON_INVALID_UTF8) \
        else _INVALID_REQUEST
    m.reason = _REASON_STRS[reason]
    m.response_shaped = True if shaped else False
    return m


cdef inline Malformed _too_long():
    cdef Malformed m = Malformed.__new__(Malformed)
    m.raw = b""
    m.code = _INVALID_REQUEST
    m.reason = "line too long"
    m.response_shaped = False
    return m


cdef inline Message _new_message(Entry* e, object line, Py_ssize_t off, bint lazy):
    cdef Message m = Message.__new__(Message)
    m.kind = _KIND_OBJS[e.kind]
    m.id = take_or_none(e.id)
    m.method = take_or_none(e.method)
    m.error = take_or_none(e.error)
    m._line = line
    m._start = off + e.start
    m._end = off + e.end
    if e.ids >= 0:
        m._ids = off + e.ids
        m._ide = off + e.ide
    else:
        m._ids = m._ide = -1
    if e.ps >= 0:
        m._ps = off + e.ps
        m._pe = off + e.pe
        if lazy:
            m._value = _UNSET
        else:
            m._value = take_or_none(e.value)
    else:
        m._ps = m._pe = -1
        m._value = None
    return m


# ---------------------------------------------------------------------------------------
# Decoder
# ---------------------------------------------------------------------------------------


cdef class _Framing:
    """Line framing shared by :class:`Decoder` and :class:`LineSplitter` (not public): the
    carry buffer of an incomplete line, the discarding of a line over the limit up to its
    newline (never buffered), the end of input. A subclass frames each complete line
    (``_run`` over a chunk's lines, ``_buffered_line`` for the carry buffer's) and says what
    stands for a line over the limit (``_too_long``)."""

    cdef PaddedBuffer* _buf
    cdef bint _discarding
    cdef bint _closed
    cdef Py_ssize_t _max_size
    cdef object _max_line_size

    def __dealloc__(self):
        del self._buf

    cdef int _set_limit(self, object max_line_size) except -1:
        self._max_line_size = int(max_line_size)
        self._max_size = min(self._max_line_size, (<Py_ssize_t>1) << 62)
        self._buf.clear()
        self._discarding = False
        self._closed = False
        return 0

    @property
    def max_line_size(self):
        return self._max_line_size

    @property
    def buffered(self):
        """Bytes of an incomplete line held until its newline arrives."""
        return <Py_ssize_t>self._buf.size()

    @property
    def closed(self):
        """True after :meth:`feed_eof`."""
        return self._closed

    cdef list _feed(self, object data):
        """The lines of a chunk: the end of a discarded or carried line first, then
        ``_run`` over the chunk's own complete lines, then the new carry."""
        if self._closed:
            raise DecoderClosedError("feed() after feed_eof()")
        if not isinstance(data, bytes):
            data = bytes(data)
        cdef list out = []
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        if n == 0:
            return out
        cdef const char* p = PyBytes_AS_STRING(data)
        cdef Py_ssize_t start = 0, length
        cdef const char* nl
        if self._discarding:
            nl = <const char*>memchr(p, b'\n', <size_t>n)
            if nl == NULL:
                return out
            self._discarding = False
            start = nl - p + 1
        if self._buf.size() > 0:
            nl = <const char*>memchr(p + start, b'\n', <size_t>(n - start))
            if nl == NULL:
                if <Py_ssize_t>self._buf.size() + n - start > self._max_size:
                    self._overflow(out)
                elif not self._buf.append(p + start, <size_t>(n - start)):
                    raise MemoryError()
                return out
            length = nl - (p + start)
            if <Py_ssize_t>self._buf.size() + length > self._max_size:
                self._buf.clear()
                out.append(self._too_long())
            else:
                if not self._buf.append(p + start, <size_t>length):
                    raise MemoryError()
                self._buffered_line(out)
            start = nl - p + 1
        start = self._run(data, p, n, start, out)
        if start < n:
            if n - start > self._max_size:
                self._overflow(out)
            elif not self._buf.assign(p + start, <size_t>(n - start)):
                raise MemoryError()
        return out

    cdef list _feed_eof(self):
        if self._closed:
            raise DecoderClosedError("feed_eof() called twice")
        self._closed = True
        cdef list out = []
        if self._buf.size() > 0:
            self._buffered_line(out)
        self._discarding = False
        return out

    cdef int _overflow(self, list out) except -1:
        self._buf.clear()
        self._discarding = True
        out.append(self._too_long())
        return 0

    cdef object _too_long(self):
        raise NotImplementedError

    cdef Py_ssize_t _run(self, object data, const char* p, Py_ssize_t n, Py_ssize_t start,
                         list out) except -1:
        """Frame the complete lines of ``data`` from ``start``; returns where the incomplete
        last line starts (``n`` when there is none)."""
        raise NotImplementedError

    cdef int _buffered_line(self, list out) except -1:
        """Frame the carry buffer's complete line (joined across chunks, or at EOF) and clear it."""
        raise NotImplementedError


cdef class Decoder(_Framing):
    """Sans-IO decoder: bytes of line-delimited JSON-RPC in, frames out.

    Args:
        lazy: keep ``params``/``result`` as raw JSON, decoded on first access.
        max_line_size: the longest line (bytes before ``\\n``) that is buffered; a longer
            one is discarded up to its newline and reported as a ``Malformed`` frame.
        max_depth: the deepest container nesting accepted (deeper is invalid JSON); at most
            :data:`MAX_DEPTH_LIMIT` (512), a depth this twin's recursive descent walks
            safely on a 256 KiB thread stack.
        max_batch_size: the most entries a batch may have; a longer batch is one
            ``Malformed`` frame (-32600, reason ``"batch too large (more than N entries)"``).

    ``feed`` never raises for bad input: every problem of the peer's bytes comes back as a
    :class:`Malformed` frame in its place, and decoding goes on with the next line. The
    only errors it raises are local ones (:class:`~acp_fast.errors.DecoderClosedError`,
    ``TypeError`` for a non-bytes argument).
    """

    cdef LineParser* _parser
    cdef bint _lazy
    cdef int _max_depth_c
    cdef object _max_depth
    cdef object _max_batch_size
    cdef object _batch_reason
    # The last large joined line's bytes, reused for the next one once its frames are gone
    # (see recycled_bytes in acp_common.h); an owned reference or NULL.
    cdef PyObject* _spare

    def __cinit__(self, *args, **kwargs):
        self._parser = new LineParser()
        self._buf = new PaddedBuffer(ACP_PADDING)
        self._spare = NULL

    def __dealloc__(self):
        del self._parser
        Py_XDECREF(self._spare)
        self._spare = NULL

    def __init__(self, *, lazy=False, max_line_size=DEFAULT_MAX_LINE_SIZE,
                 max_depth=DEFAULT_MAX_DEPTH, max_batch_size=DEFAULT_MAX_BATCH_SIZE):
        if max_line_size < 1:
            raise ValueError("max_line_size must be >= 1")
        if not 1 <= max_depth <= MAX_DEPTH_LIMIT:
            raise ValueError(f"max_depth must be between 1 and {MAX_DEPTH_LIMIT}")
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self._lazy = bool(lazy)
        self._set_limit(max_line_size)
        self._max_depth = int(max_depth)
        self._max_batch_size = int(max_batch_size)
        self._batch_reason = f"batch too large (more than {self._max_batch_size} entries)"
        self._max_depth_c = self._max_depth
        self._parser.set_max_batch(<size_t>min(self._max_batch_size, (<Py_ssize_t>1) << 62))

    @property
    def lazy(self):
        return self._lazy

    @property
    def max_depth(self):
        return self._max_depth

    @property
    def max_batch_size(self):
        return self._max_batch_size

    def feed(self, data):
        """Decode a chunk; returns the frames of every line completed by it, in order.

        A partial last line is kept for the next call.

        Raises:
            DecoderClosedError: after :meth:`feed_eof`.
        """
        return self._feed(data)

    cdef Py_ssize_t _run(self, object data, const char* p, Py_ssize_t n, Py_ssize_t start,
                         list frames) except -1:
        cdef Py_ssize_t end, length
        cdef const char* nl
        # Complete lines with SIMDJSON_PADDING bytes after them in the chunk are parsed in
        # runs [rstart, rend) indexed by one stage 1 call (LineParser.index_region); the
        # others (near the end of the chunk, or longer than a run) one by one.
        cdef Py_ssize_t rstart = 0, rend = -1, limit
        while start < n:
            nl = <const char*>memchr(p + start, b'\n', <size_t>(n - start))
            if nl == NULL:
                break
            end = nl - p
            length = end - start
            if end > rend:
                limit = min(n - <Py_ssize_t>ACP_PADDING, start + _RUN_MAX)
                if end < limit:
                    rend = last_newline(p + start, <size_t>(limit - start)) - p
                    rstart = start
                    self._parser.index_region(p + start, <size_t>(rend - start))
            if length > self._max_size:
                frames.append(_too_long())
            elif length > 0:
                if end <= rend:
                    self._run_line(data, p, rstart, start, end, frames)
                else:
                    self._chunk_line(data, p, n, start, end, frames)
            start = end + 1
        return start

    def feed_eof(self):
        """Signal end of input; returns the frame of a final unterminated line, if any.

        Raises:
            DecoderClosedError: when called twice.
        """
        return self._feed_eof()

    cdef object _too_long(self):
        return _too_long()

    cdef int _run_line(self, object data, const char* p, Py_ssize_t rstart, Py_ssize_t start,
                       Py_ssize_t end, list frames) except -1:
        """A line inside the indexed run that starts at rstart."""
        if p[end - 1] == b'\r':
            end -= 1
            if end == start:
                return 0
        self._parser.parse_in_region(<size_t>(start - rstart), <size_t>(end - start), self._lazy,
                                     self._max_depth_c)
        self._emit(data, rstart + self._parser.origin, frames)
        return 0

    cdef int _chunk_line(self, object data, const char* p, Py_ssize_t n, Py_ssize_t start,
                         Py_ssize_t end, list frames) except -1:
        """A line wholly inside the chunk: frames reference the chunk itself."""
        if p[end - 1] == b'\r':
            end -= 1
            if end == start:
                return 0
        cdef Py_ssize_t length = end - start
        cdef const char* q = p + start
        cdef char* copy
        if end + <Py_ssize_t>ACP_PADDING > n:
            # Too close to the end of the chunk for simdjson's padding: parse a copy.
            copy = self._parser.scratch(<size_t>length)
            if copy == NULL:
                raise MemoryError()
            memcpy(copy, q, <size_t>length)
            q = copy
        self._parser.parse(q, <size_t>length, self._lazy, self._max_depth_c)
        self._emit(data, start, frames)
        return 0

    cdef int _buffered_line(self, list frames) except -1:
        """The carry buffer holds a complete line (joined across chunks, or at EOF)."""
        cdef Py_ssize_t length = <Py_ssize_t>self._buf.size()
        cdef const char* q = self._buf.data()
        if q[length - 1] == b'\r':
            length -= 1
        if length > 0:
            self._parser.parse(q, <size_t>length, self._lazy, self._max_depth_c)
            if self._parser.top.kind != KIND_SKIP:
                if length >= _RECYCLE_MIN:
                    line = recycled_bytes(self._spare, q, length, _RECYCLE_KEEP)
                else:
                    line = PyBytes_FromStringAndSize(q, length)
                self._emit(line, 0, frames)
        self._buf.clear()
        return 0

    cdef int _emit(self, object owner, Py_ssize_t off, list frames) except -1:
        """Frames of the parsed line; the parser's offsets are relative to owner + off."""
        cdef Entry* top = &self._parser.top
        cdef Entry* e
        cdef int kind = top.kind
        cdef Batch batch
        cdef list entries
        cdef size_t i
        cdef bint lazy = self._lazy
        cdef const char* base
        if kind <= KIND_RESPONSE:
            frames.append(_new_message(top, owner, off, lazy))
        elif kind == KIND_MALFORMED:
            if off + top.start == 0 and off + top.end == PyBytes_GET_SIZE(owner):
                raw = owner
            else:
                raw = PyBytes_FromStringAndSize(PyBytes_AS_STRING(owner) + off + top.start,
                                                top.end - top.start)
            if top.reason == REASON_BATCH_TOO_LARGE:
                frames.append(Malformed(raw, _INVALID_REQUEST, self._batch_reason, False))
            else:
                frames.append(_new_malformed(raw, top.reason, top.response_shaped))
        elif kind == KIND_BATCH:
            batch = Batch.__new__(Batch)
            batch._line = owner
            batch._start = off + top.start
            batch._end = off + top.end
            entries = []
            base = PyBytes_AS_STRING(owner) + off
            for i in range(self._parser.entries.size()):
                e = &self._parser.entries[i]
                if e.kind == KIND_MALFORMED:
                    entries.append(_new_malformed(
                        PyBytes_FromStringAndSize(base + e.start, e.end - e.start),
                        e.reason, e.response_shaped))
                else:
                    entries.append(_new_message(e, owner, off, lazy))
            batch.entries = entries
            frames.append(batch)
        self._parser.release()
        return 0


# ---------------------------------------------------------------------------------------
# Encoders
# ---------------------------------------------------------------------------------------

cdef Writer* _writer = new Writer()
cdef bint _writer_busy = False
# The shared writer keeps its buffer up to this size between encodes: a stream of large
# messages (1 MiB texts) reuses one buffer instead of growing a fresh one, copy by copy, for
# each. One buffer per process, so the memory it holds is bounded by this.
cdef size_t _SCRATCH_KEEP = 16 * 1024 * 1024


cdef Writer* _acquire() except NULL:
    """The shared Writer, or a private one when an encoder is re-entered (a user's
    __iter__/items() calling an encoder while another encode is running)."""
    global _writer_busy
    if _writer_busy:
        return new Writer()
    _writer_busy = True
    _writer.reset(_SCRATCH_KEEP)
    return _writer


cdef inline void _release(Writer* w) noexcept:
    global _writer_busy
    if w == _writer:
        _writer_busy = False
    else:
        del w


cdef int _put_id(Writer* w, object ident) except -1:
    cdef int overflow = 0
    cdef long long v
    t = type(ident)
    if t is int:
        if not (-9223372036854775808 <= ident <= 9223372036854775807):
            raise EncodeError(f"request id {ident} does not fit in 64 bits")
        return write_int64(w[0], ident)
    if t is str:
        return write_str(w[0], ident)
    if ident is None:
        return w.put("null", 4)
    raise EncodeError(f"request id must be int, str or None, not {t.__name__}")


cdef int _put_method(Writer* w, object method) except -1:
    if type(method) is not str:
        raise EncodeError(f"method must be str, not {type(method).__name__}")
    return write_str(w[0], method)


cdef int _check_params(object params) except -1:
    # Same rule and order as the pure twin's _check_params.
    if isinstance(params, _RawJson):
        if (<bytes>params).lstrip(b" \t\r\n")[:1] not in (b"{", b"["):
            raise EncodeError("params must be a JSON object or array; RawJson holds neither")
    elif not isinstance(params, (dict, list, tuple)):
        raise EncodeError(f"params must be a JSON object or array, not {type(params).__name__}")
    return 0


def encode_value(obj):
    """Compact UTF-8 JSON for ``obj`` (no newline), splicing :class:`RawJson` verbatim.

    Output is byte-identical to ``json.dumps(obj, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)`` encoded as UTF-8 when ``obj`` holds no
    ``RawJson``.

    Raises:
        EncodeError: unsupported type, NaN/Infinity, lone surrogate, circular or too
            deep structure, ``RawJson`` with a newline.
    """
    if type(obj) is _RawJson:
        check_raw(obj)
        return bytes(obj)
    cdef Writer* w = _acquire()
    try:
        write_value(w[0], obj)
        return w.to_bytes()
    finally:
        _release(w)


cdef int _put_call(Writer* w, bint request, object id, object method, object params) except -1:
    """A request's (with ``id``) or a notification's whole line (params omitted when None)."""
    if request:
        w.put(b'{"jsonrpc":"2.0","id":', 22)
        _put_id(w, id)
        w.put(b',"method":', 10)
    else:
        w.put(b'{"jsonrpc":"2.0","method":', 26)
    _put_method(w, method)
    if params is not None:
        _check_params(params)
        w.put(b',"params":', 10)
        _put_payload(w, params)
    return w.put(b'}\n', 2)


def encode_request(id, method, params=None):
    """``{"jsonrpc":"2.0","id":…,"method":…,"params":…}\\n`` (params omitted when None)."""
    cdef Writer* w = _acquire()
    try:
        _put_call(w, True, id, method, params)
        return w.to_bytes()
    finally:
        _release(w)


def encode_notification(method, params=None):
    """``{"jsonrpc":"2.0","method":…,"params":…}\\n`` (params omitted when None)."""
    cdef Writer* w = _acquire()
    try:
        _put_call(w, False, None, method, params)
        return w.to_bytes()
    finally:
        _release(w)


def encode_result(id, result):
    """``{"jsonrpc":"2.0","id":…,"result":…}\\n`` (``None`` becomes ``null``)."""
    cdef Writer* w = _acquire()
    try:
        w.put(b'{"jsonrpc":"2.0","id":', 22)
        _put_id(w, id)
        w.put(b',"result":', 10)
        _put_payload(w, result)
        w.put(b'}\n', 2)
        return w.to_bytes()
    finally:
        _release(w)


def encode_error(id, code, message=None, data=_NO_DATA):
    """``{"jsonrpc":"2.0","id":…,"error":{"code","message","data"?}}\\n``.

    ``message`` defaults to the standard text for ``code``; ``data`` is omitted unless given.
    """
    if type(code) is not int or not (-2147483648 <= code <= 2147483647):
        raise EncodeError(f"error code must be a 32-bit int, not {code!r}")
    if message is None:
        message = _DEFAULT_MESSAGES.get(code, "Error")
    elif type(message) is not str:
        raise EncodeError(f"error message must be str, not {type(message).__name__}")
    cdef Writer* w = _acquire()
    try:
        w.put(b'{"jsonrpc":"2.0","id":', 22)
        _put_id(w, id)
        w.put(b',"error":{"code":', 17)
        write_int64(w[0], <long long>code)
        w.put(b',"message":', 11)
        write_str(w[0], message)
        if data is not _NO_DATA:
            w.put(b',"data":', 8)
            _put_payload(w, data)
        w.put(b'}}\n', 3)
        return w.to_bytes()
    finally:
        _release(w)


cdef inline int _put_payload(Writer* w, object value) except -1:
    if type(value) is _RawJson:
        check_raw(value)
        return w.put(PyBytes_AS_STRING(value), <size_t>PyBytes_GET_SIZE(value))
    return write_value(w[0], value)


@cython.wraparound(True)
def encode_batch(lines):
    """Join encoded lines (each ``\\n``-terminated) into one batch array line.

    Raises:
        EncodeError: for no lines (JSON-RPC never sends an empty array) or a line that does
            not end with exactly one newline.
    """
    parts = []
    for line in lines:
        if not line.endswith(b"\n") or b"\n" in line[:-1]:
            raise EncodeError("batch parts must be single encoded lines ending with a newline")
        parts.append(line[:-1])
    if not parts:
        raise EncodeError("a batch reply is never an empty array")
    return b"[" + b",".join(parts) + b"]\n"


def forward(message, id=_KEEP):
    """Re-emit ``message`` as a line, with ``id`` spliced in place of its own id.

    Nothing but the id's bytes changes; ``params``/``result`` are never re-encoded.
    Without ``id`` the message is re-emitted verbatim.

    Raises:
        EncodeError: ``id`` is given for a notification (it has no id to replace), or is
            not a valid id.
    """
    cdef Message m
    cdef const char* base
    cdef char* o
    cdef Py_ssize_t head, tail
    if type(message) is not Message:
        if isinstance(message, Message):
            pass
        else:
            from acp_fast import _engine_py
            if isinstance(message, _engine_py.Message):
                return _engine_py.forward(message, id) if id is not _KEEP \
                    else _engine_py.forward(message)
            raise AttributeError(
                f"'{type(message).__name__}' object has no attribute '_ensure_spans'")
    m = <Message>message
    m._check()
    base = PyBytes_AS_STRING(m._line)
    if id is _KEEP:
        out = PyBytes_FromStringAndSize(NULL, m._end - m._start + 1)
        o = PyBytes_AS_STRING(out)
        memcpy(o, base + m._start, <size_t>(m._end - m._start))
        o[m._end - m._start] = b'\n'
        return out
    if m._ids < 0:
        raise EncodeError("cannot give an id to a notification")
    cdef Writer* w = _acquire()
    cdef size_t idlen
    try:
        _put_id(w, id)
        head = m._ids - m._start
        tail = m._end - m._ide
        idlen = w.size()
        out = PyBytes_FromStringAndSize(NULL, head + <Py_ssize_t>idlen + tail + 1)
        o = PyBytes_AS_STRING(out)
        memcpy(o, base + m._start, <size_t>head)
        memcpy(o + head, w.data(), idlen)
        memcpy(o + head + idlen, base + m._ide, <size_t>tail)
        o[head + idlen + tail] = b'\n'
        return out
    finally:
        _release(w)


# ---------------------------------------------------------------------------------------
# Outbox: a connection's queued output (the pure twin's Outbox is the reference)
# ---------------------------------------------------------------------------------------


cdef class Outbox:
    """A connection's outgoing lines: encode, queue and flush scheduling in one call each;
    see the pure twin's :class:`Outbox` (the reference) for the contract. Here a line is
    encoded into the shared scratch writer and appended to one per-connection buffer (no
    bytes object per line); a flush makes one bytes object of everything queued."""

    cdef Writer* _buf
    cdef object _write
    cdef object _schedule
    cdef object _buffered
    cdef object _flush_cb
    cdef Py_ssize_t _max
    cdef Py_ssize_t _flush_at
    cdef bint _scheduled
    cdef bint _closed
    cdef public bint paused
    cdef public bint holding

    def __cinit__(self, *args, **kwargs):
        self._buf = new Writer()

    def __dealloc__(self):
        del self._buf

    def __init__(self, write, schedule, buffered, *, max_buffer=DEFAULT_MAX_WRITE_BUFFER,
                 flush_at=DEFAULT_FLUSH_AT):
        if type(max_buffer) is not int or max_buffer < 0:
            raise ValueError("max_buffer must be an int >= 0")
        if type(flush_at) is not int or flush_at < 0:
            raise ValueError("flush_at must be an int >= 0")
        self._write = write
        self._schedule = schedule
        self._buffered = buffered
        self._max = min(max_buffer, (<Py_ssize_t>1) << 62)
        self._flush_at = min(flush_at, (<Py_ssize_t>1) << 62)
        self._flush_cb = self.flush
        self._buf.reset()
        self._scheduled = False
        self._closed = False
        self.paused = False
        self.holding = False

    @property
    def size(self):
        """Bytes queued (not yet handed to ``write``)."""
        return <Py_ssize_t>self._buf.size()

    @property
    def closed(self):
        """True after :meth:`close`: nothing more is queued."""
        return self._closed

    @property
    def max_buffer(self):
        """The ``max_buffer`` the outbox was made with."""
        return self._max

    @property
    def flush_at(self):
        """The ``flush_at`` the outbox was made with."""
        return self._flush_at

    cdef int _room(self) except -1:
        cdef Py_ssize_t size = <Py_ssize_t>self._buf.size()
        if self.paused or size > self._max:
            total = size + self._buffered()
            if total > self._max:
                raise SendBufferFull(total, self._max)
        return 0

    def check_room(self):
        """Raise ``SendBufferFull`` when a send must wait (see the pure twin)."""
        self._room()

    cdef object _append(self, Writer* w):
        """Queue the line in ``w``; returns None. A line over ``flush_at`` with nothing queued
        before it is returned as bytes instead, for the caller to write at once (what queueing
        and flushing it would write, one copy less: large messages never pass through this
        connection's buffer, which stays small)."""
        if self._buf.size() == 0 and <Py_ssize_t>w.size() > self._flush_at:
            return w.to_bytes()
        self._buf.put(w.data(), w.size())
        return None

    cdef int _sent(self, object direct) except -1:
        """After _append (the encode writer released): write ``direct``, or see to the flush."""
        if direct is None:
            return self._queued()
        self._scheduled = False
        self._write(direct)
        return 0

    cdef int _queued(self) except -1:
        if <Py_ssize_t>self._buf.size() > self._flush_at:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            if not self.holding:
                self._schedule(self._flush_cb)
        return 0

    cdef int _call(self, bint request, object id, object method, object params) except -1:
        """Encode a request or notification and queue it (see _append)."""
        cdef Writer* w = _acquire()
        try:
            _put_call(w, request, id, method, params)
            direct = self._append(w)
        finally:
            _release(w)
        return self._sent(direct)

    def notify(self, method, params=None):
        """Queue a notification; False (nothing queued) after :meth:`close`."""
        if self._closed:
            return False
        self._room()
        self._call(False, None, method, params)
        return True

    def request(self, id, method, params=None):
        """Queue a request (no room check); False after :meth:`close`."""
        if self._closed:
            return False
        self._call(True, id, method, params)
        return True

    def write(self, line):
        """Queue an encoded line (no room check); False after :meth:`close`."""
        if type(line) is not bytes:
            raise TypeError("line must be bytes")
        if self._closed:
            return False
        if self._buf.size() == 0 and PyBytes_GET_SIZE(line) > self._flush_at:
            self._scheduled = False  # a large line alone: written as it is (see _append)
            self._write(line)
            return True
        self._buf.put(PyBytes_AS_STRING(line), <size_t>PyBytes_GET_SIZE(line))
        self._queued()
        return True

    cdef int _flush(self) except -1:
        self._scheduled = False
        if self._buf.size() == 0:
            return 0
        data = self._buf.to_bytes()
        self._buf.reset()
        self._write(data)
        return 0

    def flush(self):
        """Hand everything queued to ``write`` in one call (nothing when empty)."""
        self._flush()

    def release(self):
        """End :attr:`holding` and flush what was queued meanwhile."""
        self.holding = False
        if self._buf.size():
            self._flush()

    def close(self):
        """Queue nothing more (what is queued can still be flushed)."""
        self._closed = True


# ---------------------------------------------------------------------------------------
# LineSplitter
# ---------------------------------------------------------------------------------------


cdef inline bint _is_space(char c) noexcept nogil:
    return c == b' ' or c == b'\t' or c == b'\r'


cdef class LineSplitter(_Framing):
    """Sans-IO framing without decoding: bytes in, the lines a :class:`Decoder` would frame out.

    For a consumer that forwards every line as it is and so needs no decoding (a WebSocket
    sending each line of an agent in its own frame). ``feed`` returns, in order, exactly the
    ``raw`` of the frames a ``Decoder`` with the same ``max_line_size`` gives for the same
    bytes, as ``bytes``: one trailing CR dropped, empty and whitespace-only lines skipped, and
    ``b""`` in place of a line over ``max_line_size``, which is discarded up to its newline
    without being buffered (the ``Decoder``'s ``Malformed`` frame for it has an empty
    ``raw`` too). Whether a line is JSON is not looked at.

    Args:
        max_line_size: the longest line (bytes before ``\\n``) that is buffered.
        count_calls: count the lines that begin as the engines begin a call (``calls``).
    """

    cdef Py_ssize_t _calls
    cdef bint _counting

    def __cinit__(self, *args, **kwargs):
        self._buf = new PaddedBuffer(0)

    def __init__(self, *, max_line_size=DEFAULT_MAX_LINE_SIZE, count_calls=False):
        if max_line_size < 1:
            raise ValueError("max_line_size must be >= 1")
        self._set_limit(max_line_size)
        self._counting = bool(count_calls)

    @property
    def calls(self):
        """With ``count_calls``: how many of the lines the last ``feed`` (or ``feed_eof``)
        returned begin as the engines begin a call, ``{"jsonrpc":"2.0","method":`` (a request
        or a notification: no response begins so), equal to their number when every one of
        them is such a call; without it, 0."""
        return self._calls

    def feed(self, data):
        """Split a chunk; returns every line completed by it, in order (see the class).

        A partial last line is kept for the next call.

        Raises:
            DecoderClosedError: after :meth:`feed_eof`.
        """
        self._calls = 0
        return self._feed(data)

    def feed_eof(self):
        """Signal end of input; returns a final unterminated line, if any.

        Raises:
            DecoderClosedError: when called twice.
        """
        self._calls = 0
        return self._feed_eof()

    cdef object _too_long(self):
        return b""

    cdef Py_ssize_t _run(self, object data, const char* p, Py_ssize_t n, Py_ssize_t start,
                         list lines) except -1:
        cdef const char* nl
        cdef Py_ssize_t length
        while start < n:
            nl = <const char*>memchr(p + start, b'\n', <size_t>(n - start))
            if nl == NULL:
                break
            length = nl - (p + start)
            if length > self._max_size:
                lines.append(b"")
            elif length > 0:
                self._line(p + start, length, lines)
            start += length + 1
        return start

    cdef int _buffered_line(self, list lines) except -1:
        self._line(self._buf.data(), <Py_ssize_t>self._buf.size(), lines)
        self._buf.clear()
        return 0

    cdef int _line(self, const char* q, Py_ssize_t length, list lines) except -1:
        cdef Py_ssize_t i
        if q[length - 1] == b'\r':
            length -= 1
            if length == 0:
                return 0
        if _is_space(q[0]) or _is_space(q[length - 1]):
            i = 0
            while i < length and _is_space(q[i]):
                i += 1
            if i == length:
                return 0
        if self._counting and length >= 26 and memcmp(q, b'{"jsonrpc":"2.0","method":', 26) == 0:
            self._calls += 1
        lines.append(PyBytes_FromStringAndSize(q, length))
        return 0


# ---------------------------------------------------------------------------------------
# Forwarder: the conductor's pass-through path (the pure twin's Forwarder is the reference)
# ---------------------------------------------------------------------------------------

cdef extern from "acp_forward.h" namespace "acp_fast":
    cdef cppclass OutBuf:
        size_t size()
        int put(const char* p, size_t n) except -1
        int put_char(char c) except -1
        int put_int64(long long v) except -1
        object take()
    cdef cppclass EnvelopeInner:
        size_t ms, me
        long ps, pe
    bint unwrap_envelope(const char* p, size_t n, EnvelopeInner& out)
    bint claimed_method_token(const char* p, size_t n)


cdef struct _Pending:
    int src
    int check
    int64_t seq
    PyObject* sid  # owned reference


ctypedef unordered_map[int64_t, _Pending] _PendingMap

# 1: never forwarded by the fast path; 2: a successor envelope (the pure twin's table, from
# the protocol facts). The C level spells the claimed names again: claimed_method_token
# (csrc/acp_forward.cpp) and _maybe_special's bounds; tests/test_protocol_facts.py keeps them
# equal to FORWARD_CLAIMED_METHODS.
cdef dict _FWD_METHODS = {**dict.fromkeys(sorted(FORWARD_CLAIMED_METHODS), 1),
                          **dict.fromkeys(sorted(SUCCESSOR_METHODS), 2)}
_SUCCESSOR_NAMES = (PROXY_SUCCESSOR, PROXY_SUCCESSOR_SPEC)


cdef class Forwarder


cdef class _HopDecoder(Decoder):
    """A hop's lazy Decoder whose parsed lines are offered to the Forwarder first."""

    cdef Forwarder _fw
    cdef int _hop
    cdef bint _claiming

    cdef int _emit(self, object owner, Py_ssize_t off, list frames) except -1:
        cdef Entry* top = &self._parser.top
        cdef int kind = top.kind
        if self._fw._fast[self._hop] and not self._claiming:
            if kind <= KIND_RESPONSE:
                if self._fw._route(self._hop, top, PyBytes_AS_STRING(owner) + off):
                    self._parser.release()
                    return 0
                self._claiming = True
            elif kind == KIND_BATCH or kind == KIND_MALFORMED:
                self._claiming = True
        return Decoder._emit(self, owner, off, frames)


cdef class Forwarder:
    """The conductor's forwarding core; see the pure twin's :class:`Forwarder` (the
    reference) for the contract. Here the whole chunk is framed, validated, classified,
    re-id'd and appended to the destination's output buffer inside one call; the pending
    tables are C++ hash maps keyed by the fresh integer ids."""

    cdef int _nhops
    cdef int _nproxies
    cdef bint _agent
    cdef list _decoders
    cdef vector[_PendingMap] _pending
    cdef vector[int64_t] _next_id
    cdef vector[Py_ssize_t] _owed
    cdef vector[int] _fast
    cdef vector[int] _closed
    cdef vector[OutBuf*] _out
    cdef object _plain  # the last method seen that no handler claims (a fast identity test)
    cdef list _succ
    cdef list _succ_tok
    cdef int64_t _seq
    cdef Py_ssize_t _dropped
    cdef size_t _max_pending

    def __cinit__(self, *args, **kwargs):
        self._nhops = 0

    def __dealloc__(self):
        cdef size_t i
        for i in range(self._out.size()):
            del self._out[i]
        self._out.clear()
        self._clear_pending()

    cdef void _clear_pending(self) noexcept:
        cdef size_t h
        cdef _PendingMap.iterator it
        for h in range(self._pending.size()):
            it = self._pending[h].begin()
            while it != self._pending[h].end():
                Py_XDECREF(deref(it).second.sid)
                inc(it)
            self._pending[h].clear()

    def __init__(self, proxies, *, agent=True, successor=PROXY_SUCCESSOR,
                 max_line_size=DEFAULT_MAX_LINE_SIZE, max_depth=DEFAULT_MAX_DEPTH,
                 max_batch_size=DEFAULT_MAX_BATCH_SIZE, max_pending=DEFAULT_MAX_PENDING):
        if type(proxies) is not int or proxies < 0:
            raise ValueError("proxies must be an int >= 0")
        if type(max_pending) is not int or max_pending < 1:
            raise ValueError("max_pending must be an int >= 1")
        if successor not in _SUCCESSOR_NAMES:
            raise ValueError(f"successor must be one of {_SUCCESSOR_NAMES}, not {successor!r}")
        if self._nhops:
            raise RuntimeError("Forwarder.__init__ called twice")
        cdef int hops = 1 + proxies + (1 if agent else 0)
        cdef int h
        cdef _HopDecoder d
        decoders = []
        for h in range(hops):
            d = _HopDecoder(lazy=True, max_line_size=max_line_size, max_depth=max_depth,
                            max_batch_size=max_batch_size)
            d._fw = self
            d._hop = h
            d._claiming = False
            decoders.append(d)
        self._decoders = decoders
        self._nhops = hops
        self._nproxies = proxies
        self._agent = bool(agent)
        self._pending.resize(hops)
        for h in range(hops):
            self._pending[h].reserve(256)
        self._next_id.assign(hops, 1)
        self._owed.assign(hops, 0)
        self._fast.assign(hops, 0)
        self._closed.assign(hops, 0)
        for h in range(hops):
            self._out.push_back(new OutBuf())
        self._succ = [successor] * hops
        tok = encode_value(successor)
        self._succ_tok = [tok] * hops
        self._seq = 0
        self._dropped = 0
        self._plain = None
        self._max_pending = <size_t>min(max_pending, 1 << 62)

    cdef int _hop_index(self, hop) except -1:
        if type(hop) is not int or not 0 <= hop < self._nhops:
            raise IndexError(f"hop must be an int in [0, {self._nhops}), not {hop!r}")
        return hop

    @property
    def hops(self):
        return self._nhops

    @property
    def proxies(self):
        return self._nproxies

    @property
    def agent(self):
        return self._agent

    @property
    def dropped(self):
        """Responses the fast path dropped (an id no request on that hop has)."""
        return self._dropped

    @property
    def max_pending(self):
        """Requests in flight per hop before requests to it are claimed (left to Python)."""
        return <Py_ssize_t>self._max_pending

    # -- the fast path --------------------------------------------------------------------

    def feed(self, hop, data):
        cdef int h = self._hop_index(hop)
        cdef _HopDecoder d = <_HopDecoder>self._decoders[h]
        d._claiming = False
        return d.feed(data)

    def feed_eof(self, hop):
        cdef int h = self._hop_index(hop)
        cdef _HopDecoder d = <_HopDecoder>self._decoders[h]
        d._claiming = False
        return d.feed_eof()

    cdef int _route(self, int hop, Entry* e, const char* base) except -1:
        """1: forwarded (or dropped); 0: claimed (the frame goes to Python)."""
        cdef int kind = e.kind
        cdef int64_t rid, new = 0
        cdef _PendingMap.iterator it
        cdef _Pending p
        cdef OutBuf* w
        if kind == KIND_RESPONSE:
            if e.id == NULL:  # "id": null (the parser leaves a null id empty)
                self._dropped += 1
                return 1
            ident = <object>e.id
            if type(ident) is not int:
                self._dropped += 1
                return 1
            rid = PyLong_AsLongLong(ident)
            it = self._pending[hop].find(rid)
            if it == self._pending[hop].end():
                self._dropped += 1
                return 1
            if deref(it).second.check:
                return 0
            p = deref(it).second
            self._pending[hop].erase(it)
            self._owed[p.src] -= 1
            try:
                if not self._closed[p.src]:
                    w = self._out[p.src]
                    w.put(base + e.start, <size_t>(e.ids - e.start))
                    _out_id(w, <object>p.sid)
                    w.put(base + e.ide, <size_t>(e.end - e.ide))
                    w.put_char(b'\n')
            finally:
                Py_XDECREF(p.sid)
            return 1
        method = <object>e.method
        cdef bint env = False
        if method is not self._plain and _maybe_special(method):
            special = _FWD_METHODS.get(method)
            if special is None:
                self._plain = method
            elif special == 1:
                return 0
            else:
                env = True
        cdef int dst, i, n = self._nproxies
        cdef bint wrap
        if hop == 0:
            if env:
                if self._agent or n == 0:
                    return 0
                dst = n
                wrap = True
            else:
                if self._nhops < 2:
                    return 0
                dst = 1
                wrap = False
        else:
            i = hop - 1
            if self._agent and i == n:
                if env:
                    return 0
                if n > 0:
                    dst = n
                    wrap = True
                else:
                    dst = 0
                    wrap = False
            elif env:
                if i + 1 == n and not self._agent:
                    dst = 0
                    wrap = True
                else:
                    dst = i + 2
                    wrap = False
            elif i == 0:
                dst = 0
                wrap = False
            else:
                dst = i
                wrap = True
        cdef EnvelopeInner inner
        cdef const char* ip = NULL
        cdef Py_ssize_t ps = e.ps, pe = e.pe
        if env:
            if e.ps < 0:
                return 0
            ip = base + e.ps
            if not unwrap_envelope(ip, <size_t>(e.pe - e.ps), inner):
                return 0
            if claimed_method_token(ip + inner.ms, inner.me - inner.ms):
                return 0
            if self._succ[hop] != method:
                self._succ[hop] = method
                self._succ_tok[hop] = encode_value(method)
            if inner.ps >= 0:
                ps = e.ps + inner.ps
                pe = e.ps + inner.pe
            else:
                ps = -1
        cdef bint is_req = kind == KIND_REQUEST
        if is_req:
            if self._pending[dst].size() >= self._max_pending:
                return 0
            new = self._next_id[dst]
        w = self._out[dst]
        cdef bytes tok
        if not env and not wrap:
            if is_req:
                w.put(base + e.start, <size_t>(e.ids - e.start))
                w.put_int64(new)
                w.put(base + e.ide, <size_t>(e.end - e.ide))
            else:
                w.put(base + e.start, <size_t>(e.end - e.start))
            w.put_char(b'\n')
        else:
            if is_req:
                w.put(b'{"jsonrpc":"2.0","id":', 22)
                w.put_int64(new)
                w.put(b',"method":', 10)
            else:
                w.put(b'{"jsonrpc":"2.0","method":', 26)
            if wrap:
                tok = <bytes>self._succ_tok[dst]
                w.put(PyBytes_AS_STRING(tok), <size_t>PyBytes_GET_SIZE(tok))
                w.put(b',"params":{"method":', 20)
                if env:
                    w.put(ip + inner.ms, inner.me - inner.ms)
                else:
                    _out_value(w, method)
                if ps >= 0:
                    w.put(b',"params":', 10)
                    w.put(base + ps, <size_t>(pe - ps))
                w.put(b'}}\n', 3)
            else:
                w.put(ip + inner.ms, inner.me - inner.ms)
                if ps >= 0:
                    w.put(b',"params":', 10)
                    w.put(base + ps, <size_t>(pe - ps))
                w.put(b'}\n', 2)
        if is_req:
            self._add(dst, hop, e.id, 0)
        return 1

    cdef int64_t _add(self, int dst, int src, PyObject* sid, int check) except -1:
        cdef _Pending p
        cdef int64_t new = self._next_id[dst]
        p.src = src
        p.check = check
        self._seq += 1
        p.seq = self._seq
        if sid == NULL:  # "id": null (the parser leaves a null id empty)
            sid = <PyObject*>None
        Py_INCREF(<object>sid)
        p.sid = sid
        self._pending[dst][new] = p
        self._next_id[dst] = new + 1
        self._owed[src] += 1
        return new

    # -- output ---------------------------------------------------------------------------

    def write(self, hop, line):
        """Append an encoded line (``\\n``-terminated) to ``hop``'s output, in order."""
        cdef int h = self._hop_index(hop)
        if type(line) is not bytes:
            raise TypeError("line must be bytes")
        self._out[h].put(PyBytes_AS_STRING(line), <size_t>PyBytes_GET_SIZE(line))

    def take(self, hop):
        """The output gathered for ``hop`` since the last take (``None`` when there is none)."""
        cdef int h = self._hop_index(hop)
        return self._out[h].take()

    def take_all(self):
        """``[(hop, bytes), ...]`` for every hop with output, in hop order (then cleared)."""
        cdef int h
        result = []
        for h in range(self._nhops):
            if self._out[h].size():
                result.append((h, self._out[h].take()))
        return result

    # -- hop state ------------------------------------------------------------------------

    def set_fast(self, hop, on):
        cdef int h = self._hop_index(hop)
        cdef int flag = 1 if on else 0  # (a conditional assigned into a vector item
        self._fast[h] = flag            # miscompiles in Cython 3.3: a temporary reference)

    def fast(self, hop):
        return bool(self._fast[self._hop_index(hop)])

    def close(self, hop):
        cdef int h = self._hop_index(hop)
        self._closed[h] = 1

    def closed(self, hop):
        return bool(self._closed[self._hop_index(hop)])

    def successor(self, hop):
        return self._succ[self._hop_index(hop)]

    def set_successor(self, hop, name):
        cdef int h = self._hop_index(hop)
        if name not in _SUCCESSOR_NAMES:
            raise ValueError(f"successor must be one of {_SUCCESSOR_NAMES}, not {name!r}")
        self._succ[h] = name
        self._succ_tok[h] = encode_value(name)

    # -- pending tables -------------------------------------------------------------------

    def add_pending(self, dst, src, sid, check=0):
        cdef int d = self._hop_index(dst)
        cdef int s = self._hop_index(src)
        if not (type(sid) is int or type(sid) is str or sid is None):
            raise TypeError(f"request id must be int, str or None, not {type(sid).__name__}")
        if type(check) is not int or not 0 <= check <= 0x7fffffff:
            raise ValueError("check must be an int >= 0")
        return self._add(d, s, <PyObject*>sid, check)

    def pop_pending(self, hop, id):
        cdef int h = self._hop_index(hop)
        if type(id) is not int or not (-9223372036854775808 <= id <= 9223372036854775807):
            return None
        cdef int64_t rid = id
        cdef _PendingMap.iterator it = self._pending[h].find(rid)
        if it == self._pending[h].end():
            return None
        cdef _Pending p = deref(it).second
        self._pending[h].erase(it)
        self._owed[p.src] -= 1
        sid = <object>p.sid
        Py_XDECREF(p.sid)
        return (p.src, sid, p.check)

    def find_pending(self, src, sid):
        cdef int s = self._hop_index(src)
        cdef size_t h
        cdef _PendingMap.iterator it
        cdef int64_t best_seq = -1
        best = None
        t = type(sid)
        for h in range(self._pending.size()):
            it = self._pending[h].begin()
            while it != self._pending[h].end():
                if deref(it).second.src == s and deref(it).second.seq > best_seq:
                    other = <object>deref(it).second.sid
                    if type(other) is t and other == sid:
                        best_seq = deref(it).second.seq
                        best = (<int>h, deref(it).first)
                inc(it)
        return best

    def drain_pending(self, hop):
        cdef int h = self._hop_index(hop)
        cdef _PendingMap.iterator it = self._pending[h].begin()
        rows = []
        while it != self._pending[h].end():
            rows.append((deref(it).first, deref(it).second.src, <object>deref(it).second.sid))
            self._owed[deref(it).second.src] -= 1
            Py_XDECREF(deref(it).second.sid)
            inc(it)
        self._pending[h].clear()
        rows.sort(key=_first)
        return [(src, sid) for _, src, sid in rows]

    def drain_from(self, src):
        cdef int s = self._hop_index(src)
        cdef size_t h
        cdef _PendingMap.iterator it
        rows = []
        for h in range(self._pending.size()):
            it = self._pending[h].begin()
            while it != self._pending[h].end():
                if deref(it).second.src == s:
                    rows.append((deref(it).second.seq, <object>deref(it).second.sid))
                    Py_XDECREF(deref(it).second.sid)
                    it = self._pending[h].erase(it)
                    self._owed[s] -= 1
                else:
                    inc(it)
        rows.sort(key=_first)
        return [sid for _, sid in rows]

    def owed(self, src):
        return self._owed[self._hop_index(src)]

    def pending(self, hop):
        return <Py_ssize_t>self._pending[self._hop_index(hop)].size()


cdef inline bint _maybe_special(object method) noexcept:
    """False for a method no handler claims, decided from its length and first character:
    the claimed names (``_FWD_METHODS``) are 10 to 17 characters long and start with ``i``,
    ``$``, ``_`` or ``p``."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(method)
    if n < 10 or n > 17:
        return False
    cdef Py_UCS4 c = PyUnicode_READ_CHAR(method, 0)
    return c == u'i' or c == u'$' or c == u'_' or c == u'p'


cdef int _out_id(OutBuf* out, object ident) except -1:
    """A request id's JSON (as _put_id writes it) appended to ``out``."""
    if type(ident) is int:
        if -9223372036854775808 <= ident <= 9223372036854775807:
            return out.put_int64(<long long>ident)
    return _out_value(out, ident)


cdef int _out_value(OutBuf* out, object value) except -1:
    cdef Writer* w = _acquire()
    try:
        if type(value) is str:
            write_str(w[0], value)
        else:
            _put_id(w, value)
        out.put(w.data(), w.size())
    finally:
        _release(w)
    return 0


def _first(row):
    return row[0]

from acp_fast._replies import BatchReply, error_reply  # noqa: E402  (shared by both twins)

# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of the read gate's fast path (see :mod:`acp_fast.protocol.gate`).

It follows the specs of :meth:`WireSurface.gate_specs` with C-level dict lookups and exact
type tests, and answers exactly what ``WireSurface.known_variant`` answers (the pure twin):
the ``KnownVariant`` of an update that has the version's shape, else ``None`` (not a verdict).
"""

from cpython.object cimport PyObject


cdef extern from "Python.h":
    # not PyDict_GetItem: that one saves and restores the error state around every lookup
    # (a third of a lookup's cost); an error (a key whose __eq__ raises) propagates, as in
    # the pure twin
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL


cdef bint _shape(dict payload, tuple spec) except -1:
    cdef tuple required = <tuple>spec[0]
    cdef tuple fields = <tuple>spec[1]
    cdef PyObject* found
    cdef object value, item, field, table
    cdef bint is_list
    for key in required:
        if PyDict_GetItemWithError(payload, key) is NULL:
            return False
    for entry in fields:
        field = (<tuple>entry)[0]
        table = (<tuple>entry)[1]
        is_list = (<tuple>entry)[2]
        found = PyDict_GetItemWithError(payload, field)
        if found is NULL:
            continue
        value = <object>found
        if not is_list:
            if not _item(value, <dict>table):
                return False
            continue
        if value is None:
            continue
        if type(value) is not list:
            return False
        for item in <list>value:
            if not _item(item, <dict>table):
                return False
    return True


cdef bint _item(object item, dict table) except -1:
    cdef PyObject* found
    if type(item) is not dict:
        return False
    found = PyDict_GetItemWithError(<dict>item, "type")
    if found is NULL or type(<object>found) is not str:
        return False
    found = PyDict_GetItemWithError(table, <object>found)
    if found is NULL:
        return False
    return _shape(<dict>item, <tuple><object>found)


cdef class Gate:
    """``known(update)``: the ``KnownVariant`` when ``update`` is known in this version's
    shape, else ``None``. Built from ``WireSurface.gate_specs()``. (Its C face is
    ``_gate_c.pxd``: the compiled hot path calls ``known`` directly.)"""

    def __init__(self, dict specs):
        self._entries = dict(specs)

    cpdef object known(self, object update):
        cdef PyObject* found
        cdef object kind, state, reason
        cdef tuple entry
        if type(update) is not dict:
            return None
        found = PyDict_GetItemWithError(<dict>update, "sessionUpdate")
        if found is NULL:
            return None
        kind = <object>found
        if type(kind) is not str:
            return None
        found = PyDict_GetItemWithError(self._entries, kind)
        if found is NULL:
            return None
        entry = <tuple><object>found
        states = entry[2]
        if states is not None:  # state_update: the inner state first (as the pure twin)
            found = PyDict_GetItemWithError(<dict>update, "state")
            if found is NULL:
                return None
            state = <object>found
            if type(state) is not str or state not in states:
                return None
            if state == "idle":
                found = PyDict_GetItemWithError(<dict>update, "stopReason")
                if found is not NULL and <object>found is not None and type(<object>found) is not str:
                    return None
        if _shape(<dict>update, <tuple>entry[1]):
            return entry[0]
        return None

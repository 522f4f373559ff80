# The compiled read gate's C face, for the compiled hot path (roles/_hot_c.pxd cimports it):
# typed as Gate there, ``gate.known(update)`` is a direct C call (final: no override check).

cimport cython


@cython.final
cdef class Gate:
    cdef dict _entries
    cpdef object known(self, object update)

# Augmenting declarations: setup.py compiles _hot_py.py as acp_fast.roles._hot_c, and these
# make its classes C types with C-level fields (the source stays plain Python). A ``gate``
# typed as the compiled read gate makes ``self.gate.known(update)`` a direct C call.

from acp_fast.protocol._gate_c cimport Gate as CompiledGate

cdef class Context:
    cdef public object connection
    cdef public object request
    cdef public object message

cdef class ProxyContext(Context):
    pass

cdef class SessionUpdate:
    cdef public object session_id
    cdef public object kind
    cdef public object payload
    cdef public object params
    cdef public object _gate

cdef class RequestHandler:
    cdef public object connection
    cdef public object handler
    cdef public object context_type

cdef class NotificationHandler:
    cdef public object connection
    cdef public object handler
    cdef public object context_type

cdef class UpdateDispatcher:
    cdef public object connection
    cdef public CompiledGate gate
    cdef public object classify
    cdef public object apply_state
    cdef public object on_update
    cdef public object fallback
    cdef public object event_type
    cdef public object context_type

cdef class Sender:
    cdef public CompiledGate gate
    cdef public object surface
    cdef public object notify
    cdef public object request
    cdef public object guard
    cdef public object first_rule
    cdef public object initializing
    cdef public object request_ok
    cdef public object notification_ok
    cdef public bint ready

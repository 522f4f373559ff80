"""The fleet store on Redis >= 7 (the `fleet` extra: redis-py's asyncio client with hiredis).

Keys, under a prefix (`"acp-fast:"` by default, so that several fleets can share a Redis):

* `hosts`: the set of registered host ids; `host:<id>`: a hash `slots`, `used`;
  `host:<id>:alive`: the heartbeat key, with the host's TTL; `host:<id>:inbox`: a stream of
  the connections created for the host (field `c`), emptied when it registers;
* `{<connection id>}:conn`: the connection's hash: `host`, the counters of its streams,
  `readers` (the number of the last resumable reader attached), `win` and `win_bytes` (the
  replay window of its host, noted by the first append: `output_window`), and a field
  `p:<id>` per client request in flight (its JSON id; see `fail_pending`);
  `{<connection id>}:out`: its output stream; `{<connection id>}:in`: its input queue. The
  three share the TTL, refreshed by a client's push, by `touch_connection` and by
  `attach_reader` (not by the agent's output: the single-process server's idle rule), and
  shortened to a grace by `detach_reader` when the last reader attached drops;
  `{<connection id>}:rd`: one entry noting the last move of a read mark (what a host paused for
  its readers waits on), with the record's TTL; `{<connection id>}:ob`: the output's byte index,
  a sorted set of the newest entries' numbers scored by the stream's byte count before each
  (what the byte window's trim and a read mark's byte count look up, instead of reading the
  entries' lines), with the record's TTL. An output entry
  has `d` (the lines), `o` (see `_APPEND`) and, when the host routed its lines, `r` (their
  routes as a JSON list); the end marker is an entry with `x` (the reason) and no lines.

Every check-and-write is one Lua script, so it is atomic: a slot claim never takes a host above
its slots, a push never takes a queue above its bounds, a trim never cuts the newest entry.
Entry ids are given by the scripts, `"<n>-0"` with `n` counting the stream's entries from 1, so
that a reader tells a gap (trimmed entries) from the next entry by the number alone: Redis's
own `max-deleted-entry-id` does not move when a stream is trimmed, so it cannot say.

The input queue is a plain stream read from a cursor, not a consumer group: each queue has
one consumer (the host that runs the connection's agent), the order is the stream's own, and
the bound must count what is not consumed yet, which a group's acknowledgements do not remove
from the stream (it would still need trimming, plus a pending-entries list per entry).
Redelivery, the point of a group, has no use here: a host that dies takes its agent with it.
So the host's next read trims what it consumed and reads what follows, in one round trip.

Two clients reach the same server. The streaming path (a client's push, an agent's append,
the blocking reads that wake a front's reader and a host: `push_input`, `append_output`,
`follow_output`, `read_inputs`) goes through a lean client of the store's own
(`acp_fast.fleet._resp`: RESP on an asyncio protocol, parsed by hiredis, one pipelined
connection for the calls and one per blocking read), which costs a fraction of redis-py's
per-command overhead (`python bench/fleet_floor.py` measures both); every other call
(registry, records, marks, replays) goes through redis-py's asyncio client. A script in a
pipeline is sent whole (`EVAL`: Redis finds it compiled by its hash); a lone script call is
`EVALSHA`, then `EVAL` once if the server does not know it.

Every network error (refused, reset, a reply slower than the socket timeout) becomes
[`StoreUnavailable`][acp_fast.fleet.StoreUnavailable] naming the URL; neither client retries
a command (a retried script could run twice). A blocking read waits in slices shorter than the
socket timeout, so a server that stops answering is noticed within it. One Redis (or a
primary with replicas), not Redis Cluster: the host registry's scripts touch keys of many hosts.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import secrets
import time
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..remote import MissingExtraError
from .store import (
    ALL_STREAMS,
    ConnectionEnded,
    CursorOutOfWindow,
    Entry,
    FleetStore,
    HostState,
    InputQueueFull,
    InputRead,
    StoreError,
    StoreLimits,
    StoreUnavailable,
    UnknownConnection,
    cursor_number,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["DEFAULT_PREFIX", "RedisStore"]

#: The key prefix unless one is given.
DEFAULT_PREFIX = "acp-fast:"

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

# --- the scripts ----------------------------------------------------------------------------

# KEYS: host hash, alive key, hosts set, inbox. ARGV: host id, slots, ttl (ms)
_REGISTER = """
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[1], 'slots', ARGV[2], 'used', 0)
redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""

# KEYS: hosts set. ARGV: host key prefix. Returns id, slots, used of each live host; drops the dead.
_LIVE_HOSTS = """
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. id
  if redis.call('EXISTS', key .. ':alive') == 1 then
    local v = redis.call('HMGET', key, 'slots', 'used')
    out[#out + 1] = id
    out[#out + 1] = v[1] or 0
    out[#out + 1] = v[2] or 0
  else
    redis.call('SREM', KEYS[1], id)
    redis.call('DEL', key)
  end
end
return out
"""

# KEYS: host hash, alive key, hosts set. ARGV: host key prefix, the fleet's maximum (0: none).
# Returns 1 when a slot was taken.
_CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local v = redis.call('HMGET', KEYS[1], 'slots', 'used')
if not v[1] or tonumber(v[2] or 0) >= tonumber(v[1]) then return 0 end
local most = tonumber(ARGV[2])
if most > 0 then
  local total = 0
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    local key = ARGV[1] .. id
    if redis.call('EXISTS', key .. ':alive') == 1 then
      total = total + tonumber(redis.call('HGET', key, 'used') or 0)
    end
  end
  if total >= most then return 0 end
end
redis.call('HINCRBY', KEYS[1], 'used', 1)
return 1
"""

# KEYS: host hash.
_RELEASE = """
if tonumber(redis.call('HGET', KEYS[1], 'used') or 0) > 0 then
  redis.call('HINCRBY', KEYS[1], 'used', -1)
end
return 1
"""

# KEYS: conn, then keys of it. A key a write just created (a stream, the byte index) takes the
# record's TTL.
_SAME_TTL = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  for i = 2, #KEYS do
    if redis.call('PTTL', KEYS[i]) == -1 then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
"""

# KEYS: conn, out, in, byte index. ARGV: ttl (ms). Returns 0 for an unknown connection.
_TOUCH = """
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then return 0 end
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return 1
"""

# KEYS: conn, out, in, byte index. ARGV: ttl (ms). Returns the reader's number (0 for an unknown
# connection).
_ATTACH = """
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then return 0 end
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return redis.call('HINCRBY', KEYS[1], 'readers', 1)
"""

# KEYS: conn, out, in, byte index. ARGV: the reader's number, the grace (ms). Shortens each
# key's TTL to the grace (never lengthens it) unless another reader attached since. Returns 1
# when shortened.
_DETACH = """
if redis.call('HGET', KEYS[1], 'readers') ~= ARGV[1] then return 0 end
local grace = tonumber(ARGV[2])
for i = 1, 4 do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl == -1 or ttl > grace then redis.call('PEXPIRE', KEYS[i], grace) end
end
return 1
"""

# KEYS: conn, out, in, byte index. ARGV: data, max entries, max bytes, '1' when every line is
# batchable, routes ('' for none), then the JSON ids of the client requests it answers. The agent's output refreshes no
# TTL (the single-process server's idle rule: a client's request or a reader keeps it alive).
# Each entry: d (the lines), o (the stream's byte count before it), r (routes, when given), b
# (1, when every line is batchable); the byte index scores its number by o. The window keeps `max bytes` of data at most: the oldest
# entries leave (the newest stays), the first kept found in the index (no entry is read), then
# trimmed exactly. The index keeps the newest `max entries` + 1 numbers. Every `redis.call`
# costs: the record is read once and written once, and the index is trimmed by rank only once
# it can be longer than that.
_APPEND = """
local v = redis.call('HMGET', KEYS[1], 'host', 'out_seq', 'out_bytes')
if not v[1] then return false end
local size = string.len(ARGV[1])
local seq = tonumber(v[2] or 0) + 1
local before = tonumber(v[3] or 0)
local total = before + size
redis.call('HSET', KEYS[1], 'out_seq', seq, 'out_bytes', total)
local id = seq .. '-0'
local add = {'XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], id, 'd', ARGV[1], 'o', before}
if ARGV[5] ~= '' then add[#add + 1] = 'r'; add[#add + 1] = ARGV[5] end
if ARGV[4] == '1' then add[#add + 1] = 'b'; add[#add + 1] = '1' end
redis.call(unpack(add))
redis.call('ZADD', KEYS[4], before, seq)
if #ARGV > 5 then
  local answered = {'HDEL', KEYS[1]}
  for i = 6, #ARGV do answered[#answered + 1] = 'p:' .. ARGV[i] end
  redis.call(unpack(answered))
end
local floor = total - tonumber(ARGV[3])
if floor > 0 then
  local first = redis.call('ZRANGEBYSCORE', KEYS[4], floor, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local keep, keep_o = seq, before
  if first[1] then keep, keep_o = first[1], first[2] end
  redis.call('XTRIM', KEYS[2], 'MINID', keep .. '-0')
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. keep_o)
end
if seq > tonumber(ARGV[2]) + 1 then redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -(tonumber(ARGV[2]) + 2)) end
if seq == 1 then  -- the stream and the index were created (an end marker, which would have
                  -- created them first, takes the record's TTL itself); the window is noted
                  -- for the readers (output_window)
  redis.call('HSET', KEYS[1], 'win', ARGV[2], 'win_bytes', ARGV[3])
""" + _SAME_TTL + """
end
return id
"""

# KEYS: conn, stream[, its byte index]. ARGV: reason, the record's end field, its seq field,
# the entries' byte field, the record's byte count field. The end marker: an entry with x (the
# reason), once; its byte field repeats the count (nothing added), as the scripts that read it
# expect, and so does its score in the byte index.
_END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[1]) == 0 then return 1 end
local seq = redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
local bytes = redis.call('HGET', KEYS[1], ARGV[5]) or 0
redis.call('XADD', KEYS[2], seq .. '-0', 'x', ARGV[1], ARGV[4], bytes)
if KEYS[3] then redis.call('ZADD', KEYS[3], bytes, seq) end
""" + _SAME_TTL + """
return 1
"""

# KEYS: conn, byte index, marks. ARGV: the number of the entry a reader has read, its stream's
# mark name. Moves that stream's read mark (rd:<name>: the entry number, rdb:<name>: the bytes
# through it: the next entry's score in the byte index, or the record's count for the newest)
# forward, never back, and notes the move on the marks stream (one entry kept), which a host
# paused for its readers waits on (wait_read).
_MARK = """
local v = redis.call('HMGET', KEYS[1], 'rd:' .. ARGV[2], 'out_seq', 'out_bytes')
local n = tonumber(ARGV[1])
if not v[2] or n <= tonumber(v[1] or 0) or n > tonumber(v[2]) then return 0 end
local through = v[3] or 0
if n < tonumber(v[2]) then
  through = redis.call('ZSCORE', KEYS[2], n + 1)
  if not through then return 0 end
end
redis.call('HSET', KEYS[1], 'rd:' .. ARGV[2], ARGV[1], 'rdb:' .. ARGV[2], through)
redis.call('XADD', KEYS[3], 'MAXLEN', 1, '*', 'm', ARGV[1])
redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1]))
return 1
"""

# KEYS: conn. ARGV: pairs of a mark name and the number of the last entry with lines for that
# stream. The largest backlog (entries, bytes) after the marks of the streams whose reader has
# not read their last entry, each mark at least the '*' one (a reader of every stream); false
# when unknown.
_BACKLOG = """
local v = redis.call('HMGET', KEYS[1], 'out_seq', 'out_bytes', 'rd:*', 'rdb:*')
if not v[1] then return false end
local seq, size = tonumber(v[1]), tonumber(v[2] or 0)
local all, all_bytes = tonumber(v[3] or 0), tonumber(v[4] or 0)
local entries, bytes = 0, 0
for i = 1, #ARGV, 2 do
  local m = redis.call('HMGET', KEYS[1], 'rd:' .. ARGV[i], 'rdb:' .. ARGV[i])
  local mark, mark_bytes = tonumber(m[1] or 0), tonumber(m[2] or 0)
  if all > mark then mark, mark_bytes = all, all_bytes end
  if mark < tonumber(ARGV[i + 1]) then
    if seq - mark > entries then entries = seq - mark end
    if size - mark_bytes > bytes then bytes = size - mark_bytes end
  end
end
return {entries, bytes}
"""

# KEYS: conn, out, byte index. ARGV: the reason as a JSON string, the reason. The end marker (once), after
# one entry of error responses (-32603, the reason) to every request still in flight.
_FAIL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], 'ended', ARGV[2]) == 0 then return 1 end
local lines = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'p:' then
    lines[#lines + 1] = '{"jsonrpc":"2.0","id":' .. string.sub(f, 3) .. ',"error":{"code":-32603,"message":'
      .. ARGV[1] .. '}}'
  end
end
local bytes = tonumber(redis.call('HGET', KEYS[1], 'out_bytes') or 0)
if #lines > 0 then
  local data = table.concat(lines, '\\n')
  local seq = redis.call('HINCRBY', KEYS[1], 'out_seq', 1)
  redis.call('XADD', KEYS[2], seq .. '-0', 'd', data, 'o', bytes)
  redis.call('ZADD', KEYS[3], bytes, seq)
  bytes = redis.call('HINCRBY', KEYS[1], 'out_bytes', string.len(data))
end
local seq = redis.call('HINCRBY', KEYS[1], 'out_seq', 1)
redis.call('XADD', KEYS[2], seq .. '-0', 'x', ARGV[2], 'o', bytes)
redis.call('ZADD', KEYS[3], bytes, seq)
""" + _SAME_TTL + """
return 1
"""

# KEYS: conn, out, in, the output's byte index. ARGV: data, max entries, max bytes, ttl (ms),
# then the JSON ids of the requests in it (in flight until an append names them).
# Each entry: d (the lines), e (the queue's byte count after it). Unconsumed: in_seq - in_done
# entries, in_bytes - in_done_bytes bytes. Returns the id, 0 when full, false when unknown.
# A push restarts every key's TTL when the record has lost more than an eighth of it (or a
# reader's detach shortened it), and at the first push (which creates the queue): a client
# that keeps sending keeps its connection alive without four PEXPIREs per push.
_PUSH = """
local v = redis.call('HMGET', KEYS[1], 'host', 'in_seq', 'in_done', 'in_bytes', 'in_done_bytes', 'in_ended')
if not v[1] or v[6] then return false end
local size = string.len(ARGV[1])
local seq, bytes = tonumber(v[2] or 0), tonumber(v[4] or 0)
if seq - tonumber(v[3] or 0) >= tonumber(ARGV[2])
    or bytes - tonumber(v[5] or 0) + size > tonumber(ARGV[3]) then
  return 0
end
seq = seq + 1
bytes = bytes + size
local set = {'HSET', KEYS[1], 'in_seq', seq, 'in_bytes', bytes}
for i = 5, #ARGV do set[#set + 1] = 'p:' .. ARGV[i]; set[#set + 1] = 1 end
redis.call(unpack(set))
local id = seq .. '-0'
redis.call('XADD', KEYS[3], id, 'd', ARGV[1], 'e', bytes)
local ttl = tonumber(ARGV[4])
if seq == 1 or redis.call('PTTL', KEYS[1]) < ttl - ttl / 8 then
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return id
"""

# KEYS: conn, in. ARGV: the cursor of the last entry consumed, its number.
# Frees the room of the entries up to it. Returns 0 for an unknown connection.
_CONSUMED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local e = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])[1]
if e then
  redis.call('HSET', KEYS[1], 'in_done', ARGV[2], 'in_done_bytes', e[2][4])
  redis.call('XTRIM', KEYS[2], 'MINID', (tonumber(ARGV[2]) + 1) .. '-0')
end
return 1
"""


def _safe_url(url: str) -> str:
    """`url` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    netloc = f"{user}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _mark_name(stream: str | None) -> str:
    """The name of a stream's read mark: `-` the connection's, `s:<id>` a session's, `*` all."""
    if stream is None:
        return "-"
    return "*" if stream == ALL_STREAMS else "s:" + stream


@functools.lru_cache(maxsize=4096)
def _connection_keys(prefix: str, connection_id: str) -> tuple[str, str, str, str, str] | None:
    """A connection's keys (record, output, input, read marks' notices, output byte index), or
    None for an id of another shape; kept for the connections in use (each call of a round
    trip needs them)."""
    if not _ID.fullmatch(connection_id):
        return None
    key = f"{prefix}{{{connection_id}}}:"
    return key + "conn", key + "out", key + "in", key + "rd", key + "ob"


@functools.lru_cache(maxsize=64)
def _host_keys(prefix: str, host_id: str) -> tuple[str, str, str]:
    """A host's keys (record, heartbeat, inbox); kept for the hosts in use (a host's every
    read needs its inbox's)."""
    if not _ID.fullmatch(host_id):
        raise ValueError(f"a host id is 1-64 characters of A-Z a-z 0-9 _ -: {host_id!r}")
    key = f"{prefix}host:{host_id}"
    return key, key + ":alive", key + ":inbox"


def _batch(lines: Sequence[bytes]) -> bytes:
    if not lines:
        raise ValueError("a batch needs at least one line")
    return b"\n".join(lines)


def _cursor(reply: object) -> str:
    """The cursor a script returned (an entry id)."""
    if not isinstance(reply, bytes):
        raise StoreError(f"the fleet store answered {reply!r} where an entry id was due")
    return reply.decode()


def _fields(raw: Sequence[Any]) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Stream entries as RESP gives them (`[id, [field, value, …]]`) as (id, {field: value})."""
    return [(eid, dict(zip(flat[::2], flat[1::2]))) for eid, flat in raw]


def _until_end(connection_id: str, raw: Sequence[tuple[bytes, dict[bytes, bytes]]]) -> list[Entry]:
    """Entries up to the end marker; `ConnectionEnded` when the marker comes first."""
    out: list[Entry] = []
    for eid, fields in raw:
        reason = fields.get(b"x")
        if reason is not None:
            if not out:
                raise ConnectionEnded(connection_id, reason.decode("utf-8", "replace"))
            break
        routes = fields.get(b"r")
        out.append(Entry(eid.decode(), fields[b"d"].split(b"\n"), json.loads(routes) if routes else None,
                         fields.get(b"b") == b"1"))
    return out


#: Seconds a pooled connection may sit idle before it is checked with a PING ahead of its next
#: command: a connection from before a Redis restart is then replaced, not failed with the
#: command (the check is tried twice; a command never is: it may have run before its
#: connection broke). A busy connection is never checked; one last used less than this
#: before Redis went away and reused as soon as it is back still fails its command.
HEALTH_CHECK_IDLE = 0.25


def _ping_once_retry(retry: Any, no_backoff: Any, closed: type[Exception]) -> Any:
    """redis-py's `Retry` that tries a connection's health-check PING again when it fails with
    `closed` (a pooled connection the server closed: a PING is harmless twice; a PING that
    times out is not tried again) and every command once."""

    class _PingOnceRetry(retry):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(no_backoff(), 1, supported_errors=(closed,))
            self.commands = retry(no_backoff(), 0)

        async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(do, "__name__", "") == "_send_ping":
                return await super().call_with_retry(do, fail, *args, **kwargs)
            return await self.commands.call_with_retry(do, fail, *args, **kwargs)

    return _PingOnceRetry()


def _no_client_setinfo(connection: type) -> dict[str, Any]:
    """The redis-py keyword arguments that keep a new connection from sending `CLIENT SETINFO`.

    redis-py pipelines its two `CLIENT SETINFO` commands when it connects, each sent with a
    health check: on a loop busy for longer than `HEALTH_CHECK_IDLE` between the two sends, the
    check's PING is written behind the first and reads its reply (an error on Redis 7.0, which
    has no SETINFO), and the new connection fails. Nothing of the store needs the library's name
    on the server. redis-py 7+ takes `driver_info=None`; older releases `lib_name=None` and
    `lib_version=None` (the newer ones warn that those are deprecated)."""
    if any("driver_info" in inspect.signature(vars(c).get("__init__", object.__init__)).parameters
           for c in connection.__mro__):
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


class _Unavailable:
    """Turns the client's errors into the store's, inside a `with` block."""

    __slots__ = ("url", "network", "other")

    def __init__(self, url: str, network: tuple[type[BaseException], ...],
                 other: tuple[type[BaseException], ...]) -> None:
        self.url = url
        self.network = network
        self.other = other

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None or isinstance(exc, StoreError):
            return
        if isinstance(exc, self.network):
            raise StoreUnavailable(self.url, f"{type(exc).__name__}: {exc}") from exc
        if isinstance(exc, self.other):
            raise StoreError(f"the fleet store at {self.url} failed: {exc}") from exc


class RedisStore(FleetStore):
    """The [`FleetStore`][acp_fast.fleet.FleetStore] on Redis >= 7 (see the module docstring).

    Args:
        url: a redis-py URL (`redis://[:password@]host:port/db`, `rediss://` for TLS,
            `unix://path`).
        limits: the bounds applied to every connection.
        prefix: prepended to every key.
        socket_timeout: seconds a reply may take (and a blocking read's slice is shorter).
        connect_timeout: seconds connecting may take.
        max_connections: network connections to Redis at most. Every reader waiting for
            output (an SSE stream, a WebSocket, on a front) holds one for its blocking read, so
            a front needs one per connection it serves plus a few (redis-py's own default, 100,
            would refuse the 101st waiting reader); Redis's `maxclients` and the file
            descriptor limit bound it too.

    Raises:
        MissingExtraError: redis-py is not installed (`pip install 'acp-fast[fleet]'`).
    """

    def __init__(self, url: str, *, limits: StoreLimits | None = None, prefix: str = DEFAULT_PREFIX,
                 socket_timeout: float = 5.0, connect_timeout: float = 5.0,
                 max_connections: int = 65536) -> None:
        try:
            import redis.asyncio
            import redis.exceptions
            from redis.backoff import NoBackoff
            from redis.asyncio.retry import Retry

            from ._resp import ReplyError, RespClient, Script
        except ImportError as exc:
            raise MissingExtraError(
                f"the fleet store needs redis-py, which is not installed: pip install 'acp-fast[fleet]' ({exc})"
            ) from exc
        if socket_timeout <= 0 or connect_timeout <= 0 or max_connections < 1:
            raise ValueError("socket_timeout, connect_timeout and max_connections must be positive")
        self._limits = limits or StoreLimits()
        self._url = _safe_url(url)
        self._prefix = prefix
        self._slice = socket_timeout / 2
        self._redis: Redis = redis.asyncio.Redis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout,
            retry=_ping_once_retry(Retry, NoBackoff, redis.exceptions.ConnectionError), retry_on_timeout=False,
            decode_responses=False, health_check_interval=HEALTH_CHECK_IDLE, max_connections=max_connections,
            **_no_client_setinfo(redis.asyncio.Connection))
        # the streaming path's calls (push, append, the blocking reads) and a waiting reader's
        # (touch, host check) go through a lean client: one shared connection, not one each
        self._lean = RespClient(url, socket_timeout=socket_timeout, connect_timeout=connect_timeout,
                                max_connections=max_connections)
        errors = redis.exceptions
        self._guard = _Unavailable(self._url, (errors.ConnectionError, errors.TimeoutError, OSError),
                                   (errors.RedisError, ReplyError))
        script = self._redis.register_script
        self._register: AsyncScript = script(_REGISTER)
        self._live_hosts: AsyncScript = script(_LIVE_HOSTS)
        self._claim: AsyncScript = script(_CLAIM)
        self._release: AsyncScript = script(_RELEASE)
        self._touch = Script(_TOUCH)
        self._attach: AsyncScript = script(_ATTACH)
        self._detach: AsyncScript = script(_DETACH)
        self._append = Script(_APPEND)
        self._push = Script(_PUSH)
        self._consumed = Script(_CONSUMED)
        self._marked = Script(_MARK)
        self._end: AsyncScript = script(_END)
        self._fail: AsyncScript = script(_FAIL)
        self._backlog = Script(_BACKLOG)
        self._ttl = _ms(self._limits.connection_ttl)

    @property
    def limits(self) -> StoreLimits:
        return self._limits

    @property
    def url(self) -> str:
        return self._url

    @property
    def prefix(self) -> str:
        """The prefix of every key of this store."""
        return self._prefix

    async def close(self) -> None:
        with self._guard:
            await self._lean.close()
            await self._redis.aclose()

    # --- keys ----------------------------------------------------------------------------

    def _host_keys(self, host_id: str) -> tuple[str, str, str]:
        return _host_keys(self._prefix, host_id)

    def _known_keys(self, connection_id: str) -> tuple[str, str, str, str, str] | None:
        """The connection's keys (record, output, input, read marks' notices, output byte index),
        or None for an id of another shape."""
        return _connection_keys(self._prefix, connection_id)

    def _conn_keys(self, connection_id: str) -> tuple[str, str, str, str, str]:
        keys = self._known_keys(connection_id)
        if keys is None:
            raise UnknownConnection(connection_id)
        return keys

    # --- host registry -------------------------------------------------------------------

    async def register_host(self, host_id: str, slots: int, ttl: float) -> None:
        if slots < 1 or ttl <= 0:
            raise ValueError("slots must be >= 1 and ttl positive")
        key, alive, inbox = self._host_keys(host_id)
        keys = [key, alive, self._prefix + "hosts", inbox]
        with self._guard:
            await self._register(keys, [host_id, slots, _ms(ttl)])

    async def heartbeat(self, host_id: str, ttl: float) -> bool:
        alive = self._host_keys(host_id)[1]
        with self._guard:
            return bool(await self._redis.set(alive, 1, px=_ms(ttl), xx=True))

    async def unregister_host(self, host_id: str) -> None:
        keys = self._host_keys(host_id)
        with self._guard:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(*keys)
                pipe.srem(self._prefix + "hosts", host_id)
                await pipe.execute()

    async def live_hosts(self) -> list[HostState]:
        with self._guard:
            flat = await self._live_hosts([self._prefix + "hosts"], [self._prefix + "host:"])
        return [HostState(flat[i].decode(), int(flat[i + 1]), int(flat[i + 2])) for i in range(0, len(flat), 3)]

    async def host_alive(self, host_id: str) -> bool:
        alive = self._host_keys(host_id)[1]
        with self._guard:
            return bool(await self._lean.call("EXISTS", alive))

    async def claim_slot(self, host_id: str, fleet_max: int | None = None) -> bool:
        keys = [*self._host_keys(host_id)[:2], self._prefix + "hosts"]
        with self._guard:
            return bool(await self._claim(keys, [self._prefix + "host:", fleet_max or 0]))

    async def release_slot(self, host_id: str) -> None:
        keys = self._host_keys(host_id)[:1]
        with self._guard:
            await self._release(keys)

    # --- connection registry -------------------------------------------------------------

    async def create_connection(self, host_id: str) -> str:
        inbox = self._host_keys(host_id)[2]
        connection_id = secrets.token_urlsafe(24)
        conn = self._conn_keys(connection_id)[0]
        with self._guard:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(conn, mapping={"host": host_id, "out_seq": 0})
                pipe.pexpire(conn, self._ttl)
                pipe.xadd(inbox, {"c": connection_id}, maxlen=_INBOX_LENGTH, approximate=True)
                await pipe.execute()
        return connection_id

    async def read_assigned(self, host_id: str, after: str, *, block: float | None = None) -> list[tuple[str, str]]:
        """The connections created for a host after inbox cursor `after`, in order.

        See [`FleetStore.read_assigned`][acp_fast.fleet.FleetStore.read_assigned]: `XREAD`
        of the host's inbox, blocking in slices shorter than the socket timeout.
        """
        inbox = self._host_keys(host_id)[2]
        count = self._limits.read_count
        with self._guard:
            raw: list[tuple[bytes, dict[bytes, bytes]]] = list(
                await self._redis.xrange(inbox, f"({after}", "+", count=count))  # type: ignore[arg-type]
            if not raw:
                raw = await self._wait(inbox, after, count, block)
        return [(eid.decode(), fields[b"c"].decode()) for eid, fields in raw]

    async def connection_host(self, connection_id: str) -> str | None:
        keys = self._known_keys(connection_id)
        if keys is None:
            return None
        with self._guard:
            host = await self._lean.call("HGET", keys[0], "host")
        return host.decode() if isinstance(host, bytes) else None

    async def touch_connection(self, connection_id: str) -> bool:
        keys = self._known_keys(connection_id)
        if keys is None:
            return False
        with self._guard:
            return bool(await self._lean.script(self._touch, [*keys[:3], keys[4]], [self._ttl]))

    def _count(self, count: int | None) -> int:
        """A read's entry count: `count` within 1 and `limits.read_count`."""
        most = self._limits.read_count
        if count is None:
            return most
        if count < 1:
            raise ValueError(f"count must be positive: {count!r}")
        return min(count, most)

    async def attach_reader(self, connection_id: str) -> int:
        keys = self._known_keys(connection_id)
        if keys is None:
            return 0
        with self._guard:
            return int(await self._attach([*keys[:3], keys[4]], [self._ttl]))

    async def detach_reader(self, connection_id: str, reader: int, grace: float) -> bool:
        keys = self._known_keys(connection_id)
        if keys is None or reader < 1:
            return False
        if grace <= 0:
            raise ValueError(f"grace must be positive: {grace!r}")
        with self._guard:
            return bool(await self._detach([*keys[:3], keys[4]], [reader, _ms(grace)]))

    async def delete_connection(self, connection_id: str) -> bool:
        keys = self._known_keys(connection_id)
        if keys is None:
            return False
        with self._guard:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.exists(keys[0])
                pipe.delete(*keys)
                existed, _ = await pipe.execute()
        return bool(existed)

    # --- agent -> client: the output stream ----------------------------------------------

    async def append_output(self, connection_id: str, lines: Sequence[bytes],
                            routes: Sequence[str | None] | None = None, answered: Sequence[str] = (),
                            *, batchable: bool = False) -> str:
        """Append what the agent wrote in one flush as ONE entry, and trim the replay window.

        See [`FleetStore.append_output`][acp_fast.fleet.FleetStore.append_output]. The entry
        count is trimmed by `XADD … MAXLEN ~`, the bytes exactly, in the same script: one round
        trip.
        """
        keys = self._conn_keys(connection_id)
        limits = self._limits
        data = _batch(lines)
        if routes is not None and len(routes) != len(lines):
            raise ValueError(f"{len(routes)} routes for {len(lines)} lines")
        tags = json.dumps(list(routes), separators=(",", ":")) if routes is not None else ""
        with self._guard:
            cursor = await self._lean.script(self._append, [*keys[:3], keys[4]], [
                data, limits.output_entries, limits.output_bytes, "1" if batchable else "", tags, *answered])
        if cursor is None:
            raise UnknownConnection(connection_id)
        return _cursor(cursor)

    async def output_window(self, connection_id: str) -> tuple[int, int] | None:
        """The replay window its host keeps for the connection's output: (entries, bytes).

        See [`FleetStore.output_window`][acp_fast.fleet.FleetStore.output_window]: noted in
        the connection's record by the host's first append.
        """
        keys = self._known_keys(connection_id)
        if keys is None:
            return None
        with self._guard:
            got = await self._lean.call("HMGET", keys[0], "win", "win_bytes")
        match got:
            case [bytes(entries), bytes(size)] if entries.isdigit() and size.isdigit():
                return int(entries), int(size)
        return None

    async def read_output(self, connection_id: str, after: str, *, block: float | None = None,
                          count: int | None = None) -> list[Entry]:
        """The entries after cursor `after`, in order (at most `count`, at most `limits.read_count`).

        See [`FleetStore.read_output`][acp_fast.fleet.FleetStore.read_output]. One round trip
        when entries are there; waiting is `XREAD BLOCK`, in slices shorter than the socket
        timeout.
        """
        conn, out = self._conn_keys(connection_id)[:2]
        seq = cursor_number(after)
        if seq is None:
            raise CursorOutOfWindow(after)
        count = self._count(count)
        with self._guard:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hget(conn, "out_seq")
                pipe.xrange(out, f"({after}", "+", count=count)
                last, raw = await pipe.execute()
            if last is None:
                raise UnknownConnection(connection_id)
            if not raw:
                if seq != int(last):  # beyond the end, or what followed it is gone
                    raise CursorOutOfWindow(after)
                raw = await self._wait(out, after, count, block)
        if raw and cursor_number(raw[0][0].decode()) != seq + 1:
            raise CursorOutOfWindow(after)
        return _until_end(connection_id, raw)

    async def follow_output(self, connection_id: str, after: str, *, block: float,
                            mark: tuple[str | None, str] | None = None, count: int | None = None) -> list[Entry]:
        """The entries after `after`, a cursor this stream gave, waiting up to `block` seconds.

        See [`FleetStore.follow_output`][acp_fast.fleet.FleetStore.follow_output]: the read
        mark's move and `XREAD BLOCK` are one pipeline (one round trip, whether entries are
        there or it waits; a wait longer than the slice is waited in slices); the record is
        looked at (unknown, or the cursor out of the window) only after a read that got
        nothing, so the path of an entry to a waiting reader is one command.
        """
        keys = self._conn_keys(connection_id)
        seq = cursor_number(after)
        if seq is None:
            raise CursorOutOfWindow(after)
        marked = cursor_number(mark[1]) if mark is not None else None
        count = self._count(count)
        first = b"%d-0" % (seq + 1)  # the id the first entry read has, unless `after` left the window
        deadline = time.monotonic() + block
        with self._guard:
            while True:
                wait = max(1, round(min(max(deadline - time.monotonic(), 0), self._slice) * 1000))
                read = ("XREAD", "COUNT", count, "BLOCK", wait, "STREAMS", keys[1], after)
                if mark is not None and marked is not None:
                    replies = await self._lean.blocking(
                        (self._marked.call((keys[0], keys[4], keys[3]), (marked, _mark_name(mark[0]))), read),
                        wait / 1000)
                    mark = None
                else:
                    replies = await self._lean.blocking((read,), wait / 1000)
                got = replies[-1]
                if got:
                    raw = _fields(got[0][1])
                    if raw[0][0] != first:
                        raise CursorOutOfWindow(after)
                    return _until_end(connection_id, raw)
                # on the lean client's shared connection: readers that wait briefly and often
                # (a read mark owed) take no connection of their own for this
                last = await self._lean.call("HGET", keys[0], "out_seq")
                if not isinstance(last, bytes):
                    raise UnknownConnection(connection_id)
                if seq > int(last):  # beyond the end (an entry appended since the read is read next)
                    raise CursorOutOfWindow(after)
                if deadline - time.monotonic() <= 0:
                    return []

    async def wait_read(self, connection_id: str, after: str, *, block: float) -> str:
        """Wait up to `block` seconds for a read mark to move after notice `after`.

        See [`FleetStore.wait_read`][acp_fast.fleet.FleetStore.wait_read]: `XREAD BLOCK` of
        the connection's marks stream, where `mark_read` leaves one entry per move.
        """
        key = self._conn_keys(connection_id)[3]
        with self._guard:
            raw = await self._wait(key, after, 1, block)
        return raw[-1][0].decode() if raw else after

    async def end_output(self, connection_id: str, reason: str, *, fail_pending: bool = False) -> bool:
        """Mark the end of the connection's output (once: a second mark changes nothing).

        See [`FleetStore.end_output`][acp_fast.fleet.FleetStore.end_output]; the marker is an
        entry of its own, so a blocked reader wakes for it; the error responses and the marker
        are one script (two fronts that find the host dead at once fail each request once).
        """
        keys = self._known_keys(connection_id)
        if keys is None:
            return False
        with self._guard:
            if fail_pending:
                return bool(await self._fail([*keys[:2], keys[4]], [json.dumps(reason), reason]))
            return bool(await self._end([*keys[:2], keys[4]], [reason, "ended", "out_seq", "o", "out_bytes"]))

    async def mark_read(self, connection_id: str, cursor: str, stream: str | None = ALL_STREAMS) -> None:
        """Note that a reader of `stream` has read through `cursor` (marks move forward only).

        See [`FleetStore.mark_read`][acp_fast.fleet.FleetStore.mark_read].
        """
        keys = self._known_keys(connection_id)
        seq = cursor_number(cursor)
        if keys is None or seq is None:
            return
        with self._guard:
            await self._lean.script(self._marked, (keys[0], keys[4], keys[3]), (seq, _mark_name(stream)))

    async def output_backlog(self, connection_id: str, streams: Mapping[str | None, str]) -> tuple[int, int]:
        """The largest backlog, in entries and bytes, after the read marks of `streams`.

        See [`FleetStore.output_backlog`][acp_fast.fleet.FleetStore.output_backlog].
        """
        keys = self._conn_keys(connection_id)
        if not streams:
            return 0, 0
        with self._guard:
            got = await self._lean.script(self._backlog, keys[:1], [v for s, last in streams.items()
                                                                    for v in (_mark_name(s), cursor_number(last) or 0)])
        match got:
            case None:
                raise UnknownConnection(connection_id)
            case [int(entries), int(size)]:
                return entries, size
        raise StoreError(f"the fleet store answered {got!r} where a backlog was due")

    async def _wait(self, key: str, after: str, count: int,
                    block: float | None) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """`XREAD BLOCK` for up to `block` seconds, in slices shorter than the socket timeout."""
        if block is None or block <= 0:
            return []
        deadline = time.monotonic() + block
        while (left := deadline - time.monotonic()) > 0:
            got: Any = await self._redis.xread({key: after}, count=count,
                                               block=max(1, round(min(left, self._slice) * 1000)))
            if got:
                return list(got[0][1])
        return []

    # --- client -> agent: the input queue ------------------------------------------------

    async def push_input(self, connection_id: str, lines: Sequence[bytes], requests: Sequence[str] = ()) -> str:
        """Queue one batch of client lines for the agent, as ONE entry, within the bounds.

        See [`FleetStore.push_input`][acp_fast.fleet.FleetStore.push_input]. The bound check
        and the write are one script: pushes racing for the last room never overfill the queue.
        """
        keys = self._conn_keys(connection_id)
        limits = self._limits
        data = _batch(lines)
        if len(data) > limits.input_bytes:
            raise ValueError(f"a batch of {len(data)} bytes is larger than the input queue ({limits.input_bytes})")
        with self._guard:
            cursor = await self._lean.script(self._push, [*keys[:3], keys[4]], [data, limits.input_entries, limits.input_bytes,
                                                                   self._ttl, *requests])
        if cursor is None:
            raise UnknownConnection(connection_id)
        if cursor == 0:
            raise InputQueueFull(connection_id)
        return _cursor(cursor)

    async def read_input(self, connection_id: str, after: str, *, block: float | None = None) -> list[Entry]:
        """Consume the queue in order: drop what is up to `after`, return what follows.

        See [`FleetStore.read_input`][acp_fast.fleet.FleetStore.read_input]. Freeing and
        reading (`XREAD BLOCK` when it may wait) are one round trip.
        """
        keys = self._conn_keys(connection_id)
        seq = cursor_number(after)
        if seq is None:
            raise ValueError(f"not a cursor of an input queue: {after!r}")
        count = self._limits.read_count
        free = self._consumed.call((keys[0], keys[2]), (after, seq))
        with self._guard:
            if block is not None and block > 0:  # one round trip, whether entries are there or it waits
                wait = _ms(min(block, self._slice))
                known, got = await self._lean.blocking(
                    (free, ("XREAD", "COUNT", count, "BLOCK", wait, "STREAMS", keys[2], after)), wait / 1000)
                raw = _fields(got[0][1]) if got else []
                if known and not raw and block > self._slice:
                    raw = await self._wait(keys[2], after, count, block - self._slice)
            else:
                known, flat = await self._lean.pipeline((free, ("XRANGE", keys[2], f"({after}", "+", "COUNT", count)))
                raw = _fields(flat)
        if not known:
            raise UnknownConnection(connection_id)
        return _until_end(connection_id, raw)

    async def read_inputs(self, host_id: str, inbox: str, after: Mapping[str, str], *,
                          consumed: Collection[str] = (), block: float | None = None) -> InputRead:
        """A host's one read of its inbox and many input queues.

        See [`FleetStore.read_inputs`][acp_fast.fleet.FleetStore.read_inputs]: the frees
        (one script each) and one `XREAD [BLOCK]` over the inbox and every queue, in one
        pipeline; a wait is at most one slice shorter than the socket timeout.
        """
        box = self._host_keys(host_id)[2]
        queues: dict[str, str] = {}
        ended: dict[str, StoreError] = {}
        for cid in after:
            keys = self._known_keys(cid)
            if keys is None:
                ended[cid] = UnknownConnection(cid)
            else:
                queues[keys[2]] = cid
        freed = [cid for cid in consumed if cid in after and cid not in ended]
        count = self._limits.read_count
        streams: dict[Any, Any] = {box: inbox, **{key: after[cid] for key, cid in queues.items()}}
        wait = _ms(min(block, self._slice)) if block is not None and block > 0 else None
        commands: list[Any] = []
        for cid in freed:
            keys = self._conn_keys(cid)
            commands.append(self._consumed.call((keys[0], keys[2]), (after[cid], cursor_number(after[cid]) or 0)))
        read: list[Any] = ["XREAD", "COUNT", count]
        if wait is not None:
            read += ["BLOCK", wait]
        commands.append((*read, "STREAMS", *streams, *streams.values()))
        with self._guard:
            if wait is not None:
                *known, got = await self._lean.blocking(commands, wait / 1000)
            else:
                *known, got = await self._lean.pipeline(commands)
        for cid, ok in zip(freed, known):
            if not ok:
                ended[cid] = UnknownConnection(cid)
        assigned: list[tuple[str, str]] = []
        entries: dict[str, list[Entry]] = {}
        for key, flat in got or ():
            name = key.decode()
            raw = _fields(flat)
            if name == box:
                assigned = [(eid.decode(), fields[b"c"].decode()) for eid, fields in raw]
                continue
            owner = queues.get(name)
            if owner is None or owner in ended:
                continue
            try:
                entries[owner] = _until_end(owner, raw)
            except ConnectionEnded as exc:
                ended[owner] = exc
        return InputRead(assigned, entries, ended)

    async def end_input(self, connection_id: str, reason: str) -> bool:
        """Mark the end of the connection's input queue (once); later pushes find it unknown.

        See [`FleetStore.end_input`][acp_fast.fleet.FleetStore.end_input]; the marker is an
        entry of its own (outside the queue's bounds), so the host's blocked read wakes for it.
        """
        keys = self._known_keys(connection_id)
        if keys is None:
            return False
        with self._guard:
            return bool(await self._end([keys[0], keys[2]], [reason, "in_ended", "in_seq", "e", "in_bytes"]))


#: Entries a host inbox keeps at most (approximately): a host takes them as they come.
_INBOX_LENGTH = 1024


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))

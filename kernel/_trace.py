"""Trace context: W3C-compatible ids plus the call-chain depth and path.

Depth is the number of agents in the chain: a message from outside to agent A starts a
trace at depth 1 (path ``A``), A calling B gives depth 2 (``A → B``), and so on. ``child()``
refuses a hop past ``max_depth`` (default 5: the sixth agent of ``A → … → F``), naming the
path. The context travels in MCP ``params._meta``, A2A message metadata, HTTP headers and
the environment of the processes a tool starts (``TRACEPARENT``, ``ROOST_TRACE_DEPTH``,
``ROOST_TRACE_PATH``), so the breaker holds across processes.

Reading a carrier: a depth must be a whole number from 0 to 999,999,999 (else
``InvalidTraceContext``; an empty value is absent); a malformed ``traceparent`` is ignored,
as W3C asks. Of several carriers, ``deepest`` picks the one to continue, whole.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import attrs

from ._errors import (
    InvalidInput,
    InvalidTraceContext,
    RecursionLimitExceeded,
    is_mapping,
    parse_int,
)
from ._frozen import frozen_builder

DEFAULT_MAX_DEPTH = 5

META_TRACEPARENT = "traceparent"
META_DEPTH = "io.roost/trace-depth"
META_PATH = "io.roost/trace-path"
META_MAX_DEPTH = "io.roost/trace-max-depth"

HEADER_TRACEPARENT = "traceparent"
HEADER_TRACE_ID = "X-Roost-Trace-Id"
HEADER_DEPTH = "X-Roost-Trace-Depth"
HEADER_PATH = "X-Roost-Trace-Path"
HEADER_OPENSTARRY = "X-OpenStarry-Trace-ID"
TRACE_HEADERS = frozenset(
    h.lower()
    for h in (HEADER_TRACEPARENT, HEADER_TRACE_ID, HEADER_DEPTH, HEADER_PATH, HEADER_OPENSTARRY)
)

# The environment of a process a tool starts for an agent's run (OpenTelemetry's environment
# carrier names TRACEPARENT); a client in it forwards them as the headers.
ENV_TRACEPARENT = "TRACEPARENT"
ENV_DEPTH = "ROOST_TRACE_DEPTH"
ENV_PATH = "ROOST_TRACE_PATH"

MAX_DEPTH_VALUE = 999_999_999

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_MAX_PATH_ITEMS = 64
_MAX_HOP_LEN = 128


# Ids come from the OS's CSPRNG, read 4 KiB at a time: a syscall per id showed on every
# call, and so did the lock that once guarded the pool. They must stay unpredictable: the
# MCP server forwards a trace's tool logs and progress to the client whose call carries
# that trace id. A forked child starts afresh.
_RANDOM_BATCH = 4096
_HEX64 = 16
_ZERO64 = "0" * _HEX64
_random_chunks: Iterator[str] = iter(())


def _random_hex() -> str:
    """64 random bits as 16 hex digits, never all zeros (no valid W3C span id). Never the same
    chunk twice, on any thread: ``next`` on a list iterator is atomic under the GIL (a
    free-threaded build would need a lock); threads finding the pool empty each draw one."""
    global _random_chunks
    try:
        return next(_random_chunks)
    except StopIteration:
        pass
    # hex() spaces every 8 bytes and split() cuts there, both in C: cheaper than slicing in Python.
    chunks = os.urandom(_RANDOM_BATCH).hex(" ", _HEX64 // 2).split()
    while _ZERO64 in chunks:
        chunks.remove(_ZERO64)
    if not chunks:  # pragma: no cover - 4 KiB of zeros from the CSPRNG
        raise RuntimeError("os.urandom returned only zeros")
    pool = iter(chunks)
    first = next(pool)
    _random_chunks = pool
    return first


def _fresh_pool() -> None:
    global _random_chunks
    _random_chunks = iter(())


os.register_at_fork(after_in_child=_fresh_pool)


def _new_trace_id() -> str:
    # The time in seconds (8 hex digits, like AWS X-Ray's), then 96 random bits: ids made
    # together sort together, so the audit log's index by trace id grows at its end instead
    # of dirtying a random page per row.
    return f"{int(time.time()) & 0xFFFFFFFF:08x}" + _random_hex() + _random_hex()[:8]


# 64 random bits, never all zeros: exactly what a W3C span id must be.
_new_span_id = _random_hex


def new_call_id() -> str:
    """A tool call id (``call_`` + 16 hex digits), cheap like the span ids."""
    return "call_" + _random_hex()


@attrs.frozen
class TraceContext:
    """Where a call sits in its chain. Immutable; ``child()`` makes the next hop."""

    trace_id: str
    span_id: str
    depth: int
    path: tuple[str, ...]
    max_depth: int = DEFAULT_MAX_DEPTH
    parent_span_id: str | None = None
    # W3C's sampled flag as the caller sent it (its ``traceparent`` flags ``00``: False);
    # carried on to every hop, so that no daemon records a trace its caller left out.
    sampled: bool = True

    # The HTTP headers that carry a context (lowercase), as ``from_headers`` reads them.
    header_names = TRACE_HEADERS

    @classmethod
    def new(cls, origin: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> TraceContext:
        """Start a trace whose first agent is ``origin`` (depth 1)."""
        return _trace_context(_new_trace_id(), _new_span_id(), 1, (origin,), max_depth, None, True)

    def child(self, hop: str, *, max_depth: int | None = None) -> TraceContext:
        """The context for calling ``hop`` from here; RecursionLimitExceeded past the stricter
        of this trace's limit and ``max_depth`` (e.g. the callee's own)."""
        return _hop(
            self.trace_id,
            self.span_id,
            self.depth,
            self.path,
            self.max_depth,
            self.sampled,
            hop,
            max_depth,
        )

    def nested(self) -> TraceContext:
        """A span inside this one (a tool call, a model call, a server hop): the same hop
        (trace id, depth, path and limit), a new span id, and this span as its parent."""
        return _trace_context(
            self.trace_id,
            _new_span_id(),
            self.depth,
            self.path,
            self.max_depth,
            self.span_id,
            self.sampled,
        )

    @classmethod
    def root(cls, *, max_depth: int = DEFAULT_MAX_DEPTH) -> TraceContext:
        """A new trace's first span before any agent (depth 0, no path): a server hop without
        a caller's context, parent of the agent it starts (``child``, depth 1)."""
        return _trace_context(_new_trace_id(), _new_span_id(), 0, (), max_depth, None, True)

    def check_hop(self, hop: str, *, max_depth: int | None = None) -> None:
        """Raise RecursionLimitExceeded exactly when ``child(hop, max_depth=...)`` would."""
        limit = self.max_depth if max_depth is None else min(self.max_depth, max_depth)
        if len(self.path) + 1 > limit or self.depth + 1 > limit:
            raise RecursionLimitExceeded(self.path + (hop,), limit, self.depth + 1)

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    def path_text(self) -> str:
        return " → ".join(self.path)

    # ---- MCP params._meta -------------------------------------------------------
    def to_meta(self) -> dict[str, Any]:
        return {
            META_TRACEPARENT: self.traceparent,
            META_DEPTH: self.depth,
            META_PATH: list(self.path),
            META_MAX_DEPTH: self.max_depth,
        }

    def inject_meta(self, params: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        """Put this context into ``params["_meta"]`` (creating it), keeping other keys."""
        meta = params.get("_meta")
        if meta is None:
            params["_meta"] = self.to_meta()
            return params
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        meta.update(self.to_meta())
        params["_meta"] = meta
        return params

    def deepen_meta(self, params: MutableMapping[str, Any], *, field: str = "params._meta") -> None:
        """Put this context into ``params["_meta"]`` unless the one there is deeper (``deepest``):
        how a transport adds what it knows of the caller (headers, its environment) to a
        request's own carrier. InvalidTraceContext (naming ``field``) for a bad depth there."""
        current = TraceContext.from_meta(params.get("_meta"), field=field)
        chosen = TraceContext.deepest(current, self)
        if chosen is not current:
            chosen.inject_meta(params)

    @classmethod
    def from_meta(cls, meta: Any, *, field: str = "_meta") -> TraceContext | None:
        """Read a context from an MCP ``_meta`` object or A2A metadata; None if absent. A bad
        depth raises InvalidTraceContext naming ``field`` (e.g. ``params._meta``); one below
        the path's length counts as that length; a bad ``traceparent`` is ignored."""
        fields = _fields_from_meta(meta, field)
        if fields is None:
            return None
        *known, sampled = fields
        return cls(*known, sampled=sampled)

    # ---- A2A message metadata ------------------------------------------------------
    to_metadata = to_meta
    from_metadata = from_meta

    # ---- HTTP headers ----------------------------------------------------------------
    def to_headers(self) -> dict[str, str]:
        return {
            HEADER_TRACEPARENT: self.traceparent,
            HEADER_TRACE_ID: self.trace_id,
            HEADER_DEPTH: str(self.depth),
            HEADER_PATH: ",".join(self.path),
        }

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> TraceContext | None:
        """Read a context from HTTP headers (any case: ``traceparent``, ``X-Roost-Trace-*``,
        and on input only ``X-OpenStarry-Trace-ID``); None if absent; InvalidTraceContext for
        a bad depth."""
        lower = {str(k).lower(): str(v) for k, v in headers.items()}
        trace_id = lower.get(HEADER_TRACE_ID.lower()) or lower.get(HEADER_OPENSTARRY.lower())
        return cls._from_text(
            lower.get(HEADER_TRACEPARENT.lower()),
            _normalise_trace_id(trace_id),
            lower.get(HEADER_DEPTH.lower()),
            lower.get(HEADER_PATH.lower()),
            HEADER_DEPTH,
        )

    # ---- the environment of a child process --------------------------------------------
    def to_env(self) -> dict[str, str]:
        """``TRACEPARENT``, ``ROOST_TRACE_DEPTH`` and ``ROOST_TRACE_PATH`` for a child
        process: a client in it forwards them as ``traceparent`` / ``X-Roost-Trace-*``."""
        return {
            ENV_TRACEPARENT: self.traceparent,
            ENV_DEPTH: str(self.depth),
            ENV_PATH: ",".join(self.path),
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TraceContext | None:
        """The context ``to_env`` put in ``environ`` (e.g. ``os.environ``); None if absent."""
        get = environ.get
        return cls._from_text(get(ENV_TRACEPARENT), None, get(ENV_DEPTH), get(ENV_PATH), ENV_DEPTH)

    @classmethod
    def _from_text(
        cls, traceparent, trace_id, depth_text, path_text, depth_field
    ) -> TraceContext | None:
        parent = _parse_traceparent(traceparent)
        depth = _parse_depth(depth_text, depth_field)
        path = _parse_path(path_text.split(",")) if path_text and path_text.strip() else ()
        if parent is None and trace_id is None and depth is None and not path:
            return None
        *known, sampled = _assemble_fields(parent, trace_id, depth, path, None)
        return cls(*known, sampled=sampled)

    @staticmethod
    def deepest(*contexts: TraceContext | None) -> TraceContext | None:
        """The context to continue of several one request brings (headers, ``_meta``, the
        calling process): the deepest, taken whole, so that a forged lower depth never resets
        a chain; a tie goes to the first listed; the strictest ``max_depth`` applies. None when
        none is given."""
        best: TraceContext | None = None
        limit = 0
        for ctx in contexts:
            if ctx is None:
                continue
            if best is None:
                best, limit = ctx, ctx.max_depth
                continue
            if ctx.depth > best.depth:
                best = ctx
            limit = min(limit, ctx.max_depth)
        if best is None or best.max_depth == limit:
            return best
        return attrs.evolve(best, max_depth=limit)


_Fields = tuple[str, str, int, tuple[str, ...], int, bool]

# TraceContext(trace_id, span_id, depth, path, max_depth, parent_span_id, sampled), given all.
_trace_context = frozen_builder(TraceContext)


def _hop(
    trace_id: str,
    span_id: str,
    depth: int,
    path: tuple[str, ...],
    limit: int,
    sampled: bool,
    hop: str,
    max_depth: int | None,
) -> TraceContext:
    """``TraceContext(..., limit, sampled=sampled).child(hop, max_depth=max_depth)``."""
    if max_depth is not None:
        limit = min(limit, max_depth)
    path = path + (hop,)
    if len(path) > limit or depth + 1 > limit:
        raise RecursionLimitExceeded(path, limit, depth + 1)
    return _trace_context(trace_id, _new_span_id(), depth + 1, path, limit, span_id, sampled)


def _assemble_fields(parent, trace_id, depth, path, max_depth) -> _Fields:
    """A received context's fields (``_Fields``), gaps filled."""
    tid, span, sampled = parent if parent else (trace_id or _new_trace_id(), _new_span_id(), True)
    if depth is None or depth < len(path):
        depth = max(len(path), 1)
    if not path:
        path = ("?",) * depth if depth <= _MAX_PATH_ITEMS else ("?",)
    limit = max_depth if max_depth and max_depth > 0 else DEFAULT_MAX_DEPTH
    return tid, span, depth, path, limit, sampled


def _fields_from_meta(meta: Any, field: str) -> _Fields | None:
    """The context fields ``meta`` carries (see ``TraceContext.from_meta``); None if none."""
    if not is_mapping(meta):
        return None
    parent = _parse_traceparent(meta.get(META_TRACEPARENT))
    depth = _parse_depth(meta.get(META_DEPTH), f'{field}["{META_DEPTH}"]')
    path = _parse_path(meta.get(META_PATH))
    max_depth = meta.get(META_MAX_DEPTH)
    if max_depth is not None:
        try:  # a limit: a bad one is ignored (the callee's own limit applies anyway)
            max_depth = parse_int(max_depth, META_MAX_DEPTH, 1, 9_999)
        except InvalidInput:
            max_depth = None
    if parent is None and depth is None and not path:
        return None
    return _assemble_fields(parent, None, depth, path, max_depth)


# The last hex digit of a traceparent's flags when its sampled bit (0x01) is set.
_SAMPLED_DIGITS = frozenset("13579bdf")


def _parse_traceparent(value: Any) -> tuple[str, str, bool] | None:
    """(trace id, span id, sampled flag) of a well-formed ``traceparent`` (trimmed, any
    case); None for anything else, all-zero ids too (ignored: its trace counts as sampled)."""
    if not isinstance(value, str):
        return None
    value = value.strip().lower()
    if not _TRACEPARENT.match(value):
        return None
    trace_id, span_id = value[3:35], value[36:52]  # the pattern is fixed-width
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return trace_id, span_id, value[54] in _SAMPLED_DIGITS


def _normalise_trace_id(value: str | None) -> str | None:
    if not value:
        return None
    v = value.strip().lower().replace("-", "")
    if _HEX32.match(v) and v != "0" * 32:
        return v
    return None


def _parse_depth(value: Any, field: str) -> int | None:
    """A depth from 0 to ``MAX_DEPTH_VALUE`` (an int or its digits); None for None or "" (an
    unset ``$VAR`` in a header); else InvalidTraceContext naming ``field``, never "no depth"
    (which would restart the count)."""
    text = value.strip() if isinstance(value, str) else value
    if text is None or text == "":
        return None
    try:
        return parse_int(text, field, 0, MAX_DEPTH_VALUE)
    except InvalidInput:
        raise InvalidTraceContext(field, value) from None


def _parse_path(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple([hop[:_MAX_HOP_LEN] for v in value[:_MAX_PATH_ITEMS] if (hop := str(v).strip())])

"""frozen_builder: instances of plain frozen attrs classes filled straight into their slots."""

from __future__ import annotations

import attrs
import pytest
from roost.kernel import TraceContext
from roost.kernel._frozen import frozen_builder


def test_frozen_builders_make_what_the_class_makes():
    from roost.kernel import Event, ToolResult
    from roost.kernel._actor import _event
    from roost.kernel._agent import AgentReply, _agent_reply
    from roost.kernel._loop import (
        CompletionRequest,
        LoopResult,
        Message,
        Usage,
        _loop_result,
        message_of,
        request_of,
    )
    from roost.kernel._tools import _tool_result
    from roost.kernel._trace import _trace_context

    ctx = TraceContext.new("a")
    cases = [
        (_trace_context, TraceContext, ("t" * 32, "s" * 16, 2, ("a", "b"), 5, "p" * 16, False)),
        (message_of, Message, ("user", "hi", (), None, None, False, frozenset())),
        (request_of, CompletionRequest, ("a", "sys", (), (), "m", {"t": 1})),
        (_loop_result, LoopResult, ("x", (), 1, "end_turn", Usage(1, 2), False)),
        (_agent_reply, AgentReply, ("a", "x", "", "t", False, 1, "end_turn", ())),
        (_tool_result, ToolResult, (({"type": "text", "text": "x"},), None, False, frozenset())),
        (_event, Event, ("K", "a", "b", {"p": 1}, ctx, "id", None, 1.5)),
    ]
    for build, cls, values in cases:
        assert build is not cls, cls  # the fast path is in use
        made = build(*values)
        assert type(made) is cls and made == cls(*values) and repr(made) == repr(cls(*values))
        with pytest.raises(AttributeError):  # still frozen
            made.__setattr__(attrs_fields(cls)[0], None)


def attrs_fields(cls):
    return [f.name for f in attrs.fields(cls)]


def test_a_frozen_builder_of_a_class_that_checks_its_values_is_the_class():

    @attrs.frozen
    class Checked:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.frozen
    class Converted:
        x: int = attrs.field(converter=int)

    @attrs.frozen
    class PostInit:
        x: int

        def __attrs_post_init__(self) -> None:
            pass

    @attrs.frozen(slots=False)
    class NoSlots:
        x: int

    @attrs.frozen(cache_hash=True)
    class CachedHash:
        x: int

    @attrs.frozen
    class Base:
        x: int

    @attrs.frozen
    class Derived(Base):
        y: int

    @attrs.frozen(init=False)
    class OwnInit:  # regression (review): a hand-written __init__ was skipped by the builder
        x: int

        def __init__(self, x: int) -> None:
            self.__attrs_init__(x * 2)

    @attrs.frozen
    class OwnNew:
        x: int

        def __new__(cls, *args, **kwargs):
            return super().__new__(cls)

    for cls in (Checked, Converted, PostInit, NoSlots, CachedHash, Derived, OwnInit, OwnNew):
        assert frozen_builder(cls) is cls
    assert frozen_builder(OwnInit)(2).x == 4

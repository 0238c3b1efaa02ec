"""``frozen_builder``: build instances of a frozen, slotted attrs class without its
``__init__``, for the kernel's hot paths (events, trace contexts, messages, results)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

_T = TypeVar("_T")


def frozen_builder(
    cls: type[_T], *, checked_by_caller: Mapping[str, tuple[Any, Any]] | None = None
) -> Callable[..., _T]:
    """``cls(*values)`` for a frozen, slotted attrs class, every field given in order, straight
    into the slots (no class call, no attrs ``__init__``, no defaults). A class whose
    ``__init__`` does more (validators, converters, hooks, own slots, a base) gets ``cls``,
    unless ``checked_by_caller`` names each such field's exact (validator, converter) pair,
    whose work every caller does itself."""
    known = checked_by_caller or {}
    fields = attrs.fields(cls)
    init = cls.__dict__.get("__init__")
    plain = (
        cls.__bases__ == (object,)
        and cls.__new__ is object.__new__
        # attrs' own __init__ (a hand-written one may do more than fill the slots)
        and getattr(getattr(init, "__code__", None), "co_filename", "").startswith(
            "<attrs generated"
        )
        and set(getattr(cls, "__slots__", ("__dict__",)))
        <= {f.name for f in fields} | {"__weakref__"}
        and not any(hasattr(cls, hook) for hook in ("__attrs_pre_init__", "__attrs_post_init__"))
        and all(
            f.init and (f.validator, f.converter) == known.get(f.name, (None, None)) for f in fields
        )
    )
    setters = [getattr(cls.__dict__.get(f.name), "__set__", None) for f in fields]
    if not plain or None in setters:
        return cls
    names = [f"v{i}" for i in range(len(fields))]
    body = "".join(f"    set{i}(obj, {name})\n" for i, name in enumerate(names))
    source = f"def build({', '.join(names)}):\n    obj = new(cls)\n{body}    return obj\n"
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    namespace.update({f"set{i}": setter for i, setter in enumerate(setters)})
    exec(compile(source, f"<frozen builder of {cls.__qualname__}>", "exec"), namespace)
    build = namespace["build"]
    build.__doc__ = f"{cls.__qualname__}({', '.join(f.name for f in fields)}), every field given."
    return build

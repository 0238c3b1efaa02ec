"""Plugin discovery: first-party and third-party plugins load the same way."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

import attrs
import pluggy

from ._hookspecs import ENTRY_POINT_GROUP, PROJECT, RoostHookSpecs

log = logging.getLogger("roost.plugins")


@attrs.frozen
class PluginFailure:
    """A plugin that could not be loaded: its entry-point name and why."""

    name: str
    stage: str  # "import" | "register"
    error: str


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus a record of plugins that failed and were skipped."""

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.add_hookspecs(RoostHookSpecs)
        self.failures: list[PluginFailure] = []
        self.loaded: list[str] = []

    def register_named(self, name: str, plugin: Any) -> bool:
        """Register ``plugin`` under ``name``; a failure is recorded and logged, not raised."""
        try:
            self.register(plugin, name=name)
        except Exception as exc:  # a broken plugin must not take the kernel down
            self._fail(name, "register", exc)
            return False
        self.loaded.append(name)
        return True

    def load_entry_points(self, *, disabled: Iterable[str] = ()) -> None:
        """Import and register every ``roost.plugins`` entry point not in ``disabled``."""
        skip = set(disabled)
        seen: set[str] = set()
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in skip or ep.name in seen:
                continue
            seen.add(ep.name)
            try:
                plugin = ep.load()
            except BaseException as exc:  # SystemExit/KeyboardInterrupt at import too
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self._fail(ep.name, "import", exc)
                continue
            self.register_named(ep.name, plugin)

    def call_each(
        self, hook_name: str, *, answers: tuple[type[Exception], ...] = (), **kwargs: Any
    ) -> list[tuple[str, list[Any]]]:
        """``(plugin name, flattened results)`` of the hook, each called with the ``kwargs`` it
        takes; one raising goes to ``failures``, unless ``answers`` has its type (then a result)."""
        out = []
        for impl in getattr(self.hook, hook_name).get_hookimpls():
            name = self.get_name(impl.plugin) or repr(impl.plugin)
            try:
                argnames = impl.argnames
                result = impl.function(**{k: v for k, v in kwargs.items() if k in argnames})
            except answers as exc:
                result = exc
            except Exception as exc:
                self.failures.append(
                    PluginFailure(
                        name, "register", f"{hook_name} raised {type(exc).__name__}: {exc}"
                    )
                )
                log.error("plugin %s: %s raised %s", name, hook_name, exc)
                continue
            out.append((name, collect([result])))
        return out

    def _fail(self, name: str, stage: str, exc: BaseException) -> None:
        failure = PluginFailure(name, stage, f"{type(exc).__name__}: {exc}")
        self.failures.append(failure)
        log.error("plugin %r failed at %s and was skipped: %s", name, stage, failure.error)


def collect(results: Iterable[Any]) -> list[Any]:
    """Flatten hook results (each plugin returns a list or None)."""
    out: list[Any] = []
    for item in results:
        if item is None:
            continue
        if isinstance(item, (list, tuple)):
            out.extend(x for x in item if x is not None)
        else:
            out.append(item)
    return out

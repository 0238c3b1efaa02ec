"""roost benchmarks: ``python -m bench`` (``make bench``).

Every number is printed next to a floor measured in the same run (a bare Trio equivalent,
or the interpreter itself), as a ratio, with PASS/MISS against its target. Speed never
fails the run; the table is for people.

A benchmark is a module in this package with ``run(quick: bool) -> list[Row]``; modules
whose names start with ``_`` are helpers. Adding a module is all it takes to add a bench.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import attrs

__all__ = ["Row", "Target", "format_table", "rss_kb"]

_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


@attrs.frozen
class Target:
    """A goal: ``on`` is ``"ratio"`` or ``"value"``; ``op`` is ``">="`` or ``"<="``."""

    on: str
    op: str
    bound: float

    def __attrs_post_init__(self) -> None:
        if self.on not in ("ratio", "value"):
            raise ValueError(f"Target.on: expected 'ratio' or 'value', got {self.on!r}")
        if self.op not in _OPS:
            raise ValueError(f"Target.op: expected '>=' or '<=', got {self.op!r}")

    def describe(self, unit: str) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        if self.on == "ratio":
            return f"ratio {sign} {self.bound:g}"
        return f"{sign} {self.bound:g} {unit}"


@attrs.frozen
class Row:
    """One line of the table. ``value`` None means "n/a" (``note`` says why)."""

    name: str
    value: float | None
    unit: str
    floor: float | None = None
    floor_label: str = ""
    target: Target | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """value / floor when both were measured."""
        if self.value is None or not self.floor:
            return None
        return self.value / self.floor

    @property
    def status(self) -> str:
        """PASS, MISS, n/a, or "" when there is no target."""
        if self.target is None:
            return "" if self.value is not None else "n/a"
        measured = self.ratio if self.target.on == "ratio" else self.value
        if measured is None or math.isnan(measured):
            return "n/a"
        return "PASS" if _OPS[self.target.op](measured, self.target.bound) else "MISS"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "floor": self.floor,
            "floor_label": self.floor_label,
            "ratio": self.ratio,
            "target": self.target.describe(self.unit) if self.target else None,
            "status": self.status,
            "note": self.note,
        }


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def format_table(rows: list[Row]) -> str:
    """The rows as an aligned text table."""
    header = ("benchmark", "roost", "floor", "ratio", "target", "result")
    lines = [header]
    for row in rows:
        floor = _number(row.floor, row.unit) if row.floor is not None else "—"
        if row.floor_label:
            floor = f"{floor} ({row.floor_label})"
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "—"
        target = row.target.describe(row.unit) if row.target else "—"
        status = row.status or "—"
        if row.note:
            status = f"{status}  {row.note}"
        lines.append((row.name, _number(row.value, row.unit), floor, ratio, target, status))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for i, line in enumerate(lines):
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        out.append("  ".join([*cells, line[-1]]).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in [*widths, len(header[-1])]))
    return "\n".join(out)


def rss_kb() -> int:
    """This process's resident set size in KB (``VmRSS`` from /proc/self/status)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("VmRSS not found in /proc/self/status")

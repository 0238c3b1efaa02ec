"""``roost --help`` wall time (best of 5) next to a bare interpreter start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from . import Row, Target

RUNS = 5


def _best_wall_time(argv: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, timeout=30, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def run(quick: bool) -> list[Row]:
    runs = 3 if quick else RUNS
    name = f"roost --help (best of {runs})"
    target = Target("value", "<=", 300)
    floor = _best_wall_time([sys.executable, "-c", "pass"], runs) * 1000
    roost = Path(sys.executable).with_name("roost")
    if not roost.exists():
        return [Row(name, None, "ms", floor, "python -c pass", target, note=f"{roost} missing")]
    try:
        value = _best_wall_time([str(roost), "--help"], runs) * 1000
    except (subprocess.SubprocessError, OSError) as exc:
        note = f"roost --help failed: {type(exc).__name__}"
        return [Row(name, None, "ms", floor, "python -c pass", target, note=note)]
    return [Row(name, value, "ms", floor, "python -c pass", target)]

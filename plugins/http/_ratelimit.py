"""GCRA rate limiting, sans-I/O: the caller passes the clock, so it is easy to test."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from roost.kernel import number_setting

DEFAULT_MAX_KEYS = 10_000
_EPSILON = 1e-9  # seconds; absorbs floating-point noise at the boundary


class Gcra:
    """Generic Cell Rate Algorithm: ``rate_per_s`` sustained, ``burst`` at once; a key's theoretical
    arrival time is dropped once passed, at most ``max_keys`` kept (least recently seen evicted)."""

    def __init__(self, rate_per_s: float, burst: int, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        for name, value, integer, what in (
            ("rate_per_s", rate_per_s, False, "a positive number of requests per second"),
            ("burst", burst, True, "an integer of at least 1"),
            ("max_keys", max_keys, True, "an integer of at least 1"),
        ):
            if number_setting(value, integer=integer) is None:
                raise ValueError(f"{name} must be {what}, got {value!r}")
        self.rate_per_s = float(rate_per_s)
        self.burst = burst
        self.max_keys = max_keys
        self._interval = 1.0 / self.rate_per_s
        self._tolerance = self._interval * burst
        # key -> TAT, in least-recently-seen order.
        self._tat: OrderedDict[Hashable, float] = OrderedDict()

    def check(self, key: Hashable, now: float) -> tuple[bool, float]:
        """Count one request from ``key`` at ``now`` (monotonic seconds): ``(allowed,
        seconds until one would be)``; a refused request is not counted."""
        tat = self._tat.get(key)
        if tat is None:
            self._make_room(now)
            tat = now
        else:
            self._tat.move_to_end(key)
            tat = max(tat, now)
        # Written as a difference from ``now`` so a fresh key is exact in floating point.
        debt = (tat - now) + self._interval
        if debt > self._tolerance + _EPSILON:
            self._tat[key] = tat
            return False, debt - self._tolerance
        self._tat[key] = tat + self._interval
        return True, 0.0

    def _make_room(self, now: float) -> None:
        # Drop expired keys from the cold end, then evict the coldest if still full.
        while self._tat:
            oldest_key, oldest_tat = next(iter(self._tat.items()))
            if oldest_tat > now and len(self._tat) < self.max_keys:
                break
            del self._tat[oldest_key]

    def __len__(self) -> int:
        return len(self._tat)

    def reset(self) -> None:
        """Forget every key."""
        self._tat.clear()

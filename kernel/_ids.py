"""Time-ordered ids: UUID version 7 (RFC 9562).

48 bits of Unix time in milliseconds, then 74 random bits: ids sort in the order made, so
an index on them grows at its end (a random id's insert lands on a random index page).
"""

from __future__ import annotations

import time

from ._trace import _random_hex

_VARIANT = "89ab"


def uuid7_hex() -> str:
    """A version 7 UUID as 32 hex digits (like ``uuid.uuid4().hex``)."""
    h = f"{time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF:012x}" + _random_hex() + _random_hex()[:4]
    return f"{h[:12]}7{h[13:16]}{_VARIANT[int(h[16], 16) & 3]}{h[17:32]}"


def uuid7() -> str:
    """A version 7 UUID as text, like ``str(uuid.uuid4())``."""
    h = uuid7_hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

"""Time-ordered ids (UUID version 7) for rows that the store indexes."""

from __future__ import annotations

import time
import uuid

from roost.kernel._ids import uuid7, uuid7_hex
from waiting import wait_until_sync


def test_uuid7_is_a_version_7_rfc_uuid_that_starts_with_the_time_in_ms():
    before = time.time_ns() // 1_000_000
    text = uuid7()
    after = time.time_ns() // 1_000_000
    parsed = uuid.UUID(text)
    assert str(parsed) == text and parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert before <= int(parsed.hex[:12], 16) <= after
    assert len(uuid7_hex()) == 32 and uuid.UUID(uuid7_hex()).version == 7


def test_ids_made_later_sort_later_and_never_repeat():
    first = [uuid7() for _ in range(2000)]
    last_ms = int(uuid.UUID(max(first)).hex[:12], 16)
    wait_until_sync(lambda: time.time_ns() // 1_000_000 > last_ms, "the next millisecond")
    second = [uuid7() for _ in range(2000)]
    assert max(first) < min(second)  # a later millisecond sorts after
    assert len(set(first + second)) == 4000

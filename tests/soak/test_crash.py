"""A day of traffic with a crash in the middle, bounded: mixed traffic from several client
processes, ``roost run`` SIGKILLed half-way and restarted on the same data directory.
``ROOST_SOAK_SECONDS`` makes it longer (default 16 s of traffic)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from bench._soak import crash

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def test_nothing_acknowledged_is_lost_when_the_daemon_is_killed(tmp_path):
    seconds = float(os.environ.get("ROOST_SOAK_SECONDS", "16"))
    result = crash(tmp_path, seconds=seconds, in_flight=6, waiting=6)
    print(json.dumps(result, indent=1))
    assert result["problems"] == []
    assert result["acked_tasks"] > 100 and result["acked_sessions"] > 100
    assert result["audited_sessions"] == result["acked_sessions"]
    assert result["in_flight_failed"] == 6  # running at the kill: failed, with the reason
    assert result["resubscribed"] == 6  # waiting for input across it: replayed, then answered
    assert result["children_at_kill"] >= 6 and result["orphans"] == 0
    # Around the kill only connection failures, and MCP sessions the crash ended (404: the
    # documented "initialize again"); nothing else.
    for kind in result["summary"]["errors"]:
        assert kind.startswith(("OSError", "LoadError", "BrokenResourceError", "http 404")), kind

"""No leak: a real ``roost run`` under mixed traffic and abandoned MCP sessions gives its
memory back and holds every table to its bound (``bench/load.py`` runs the full size)."""

from __future__ import annotations

import json
import sys

import pytest

from bench._soak import leak

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def test_rss_returns_and_every_table_stays_bounded(tmp_path):
    result = leak(tmp_path, warm_requests=2000, warm_sessions=1000, requests=4000, sessions=2000)
    print(json.dumps({k: v for k, v in result.items() if k != "phases"}, indent=1))
    for name, phase in result["phases"].items():
        assert phase["errors"] == {}, (name, phase["errors"])
        assert phase["answered"] == phase["asked"], name
    # The callers share the requests out evenly, so a few fewer may be asked for.
    assert 3900 <= result["phases"]["mixed"]["asked"] <= 4000
    assert 1900 <= result["phases"]["open"]["asked"] <= 2000
    assert result["problems"] == []

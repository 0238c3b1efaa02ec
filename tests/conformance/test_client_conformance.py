"""Runs the MCP conformance suite in client mode against roost's client (slow; needs the
Node cache that tests/conformance/install.sh creates — skipped when it is missing)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CACHE = Path(os.environ.get("ROOST_NODE_CACHE", HERE.parents[1] / ".cache" / "node"))


@pytest.mark.slow
def test_client_conformance_scenarios_pass_at_both_revisions():
    if not (CACHE / "node_modules" / "@modelcontextprotocol" / "conformance").exists():
        pytest.skip("conformance suite not installed (bash tests/conformance/install.sh)")
    run = subprocess.run(
        ["bash", str(HERE / "run_client.sh")], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        "PASS 2025-11-25 initialize" in run.stdout
        and "PASS 2026-07-28 request-metadata" in run.stdout
    )

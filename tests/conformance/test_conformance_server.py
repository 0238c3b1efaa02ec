"""The MCP conformance suite (server mode) against roost's /mcp, at 2025-11-25 and
2026-07-28, through tests/conformance/run_server.sh (which installs Node 22 and the suite
from npm into .cache/node on first use). Failures outside expected-failures.txt fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("run_server.sh")


@pytest.mark.slow
def test_mcp_conformance_suite_server_mode():
    if shutil.which("npm") is None:
        pytest.skip("npm is needed to install the conformance suite (make conformance)")
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert output.count("Baseline check passed") == 2, output[-6000:]

"""``roost demo``: collaboration trace tree, then the breaker, on a throw-away home."""

from __future__ import annotations

import io

from roost.kernel import default_config
from roost.plugins.cli._commands import run_demo


async def test_demo_shows_the_collaboration_tree_and_the_breaker(tmp_path):
    out = io.StringIO()
    code = await run_demo(default_config(home=tmp_path / "user-home"), out)
    text = out.getvalue()
    assert code == 0, text
    assert "└─ coordinator → worker  (MCP tools/call" in text
    assert "    └─ worker → reviewer  (MCP tools/call" in text
    assert "approved" in text
    assert "artifact: draft.md (text/markdown, " in text  # handed over by the worker, up the chain
    assert "depth limit is 5" in text
    assert "coordinator → worker → reviewer → coordinator → worker → reviewer" in text
    # the demo ran on a temporary data directory, not the user's
    assert not (tmp_path / "user-home" / "roost.db").exists()

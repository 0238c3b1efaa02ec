"""The tool registry's name check: what it lets in is a valid MCP tool name, whole."""

from __future__ import annotations

import pytest
from roost.kernel import Tool, ToolNameCollision, ToolRegistry, ToolSpec


async def _handler(call, ctx):  # never called
    raise AssertionError


@pytest.mark.parametrize("name", ["echo\n", "echo\r\n", "", "a b", "x" * 129, "écho"])
def test_a_tool_name_that_is_not_a_whole_wire_name_is_refused(name):
    # A pattern ending in "$" also matched before a trailing line break, so a remote MCP
    # server's tool "echo\n" was registered.
    with pytest.raises(ToolNameCollision, match="not a valid MCP tool name"):
        ToolRegistry().register(Tool(ToolSpec(name, "d", owner="mcp:hostile"), _handler))


def test_a_valid_tool_name_is_registered():
    registry = ToolRegistry()
    registry.register(Tool(ToolSpec("mcp_fs.read-file_2", "d", owner="mcp:fs"), _handler))
    assert "mcp_fs.read-file_2" in registry

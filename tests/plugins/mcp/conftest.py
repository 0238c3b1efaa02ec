"""Shared fixtures for roost's MCP server tests: a real kernel with two agents and tools."""

from __future__ import annotations

import pytest
from mcp_server_fixtures import McpTestTools, standard_agents
from roost.kernel import default_config, open_kernel


@pytest.fixture
def tools_plugin():
    return McpTestTools()


@pytest.fixture
def config(tmp_path):
    return default_config(home=tmp_path / "home", agents={"bundled": False})


@pytest.fixture
async def kernel(config, tools_plugin):
    async with open_kernel(config, agents=standard_agents(), plugins=[tools_plugin]) as k:
        yield k

"""A third-party plugin, pip-installed for real, loads exactly like the built-in ones.

The fixture package ``tests/fixtures/roost-hello-plugin`` declares two entry points in
group ``roost.plugins``: ``hello`` (a ``hello`` tool) and ``hello_broken`` (raises at
import). Installing it needs no network: ``--no-deps --no-build-isolation`` builds it with
the venv's own setuptools.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from roost.kernel import ENTRY_POINT_GROUP, PluginManager, ToolCall, ToolContext

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "roost-hello-plugin"
DIST = "roost-hello-plugin"


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def forget_fixture_modules() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "roost_hello_plugin"]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture
def installed_hello(tmp_path):
    # Build from a copy so the build leaves nothing behind in the source tree.
    source = tmp_path / "src"
    shutil.copytree(FIXTURE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = pip("install", "--no-deps", "--no-build-isolation", "--no-index", str(source))
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    forget_fixture_modules()
    try:
        yield
    finally:
        pip("uninstall", "--yes", DIST)
        forget_fixture_modules()


async def test_installed_plugin_is_discovered_and_its_tool_works(installed_hello, tmp_path):
    pm = PluginManager()
    pm.load_entry_points()
    assert "hello" in pm.loaded and "tools" in pm.loaded

    tools = {t.spec.name: t for _, found in pm.call_each("roost_tools", config=None) for t in found}
    assert "hello" in tools and "bash" in tools  # third-party and built-in side by side
    hello = tools["hello"]
    assert hello.spec.qualified_name == "hello:hello"
    ctx = ToolContext(agent="tester", workspace=tmp_path)
    result = await hello.handler(ToolCall(name="hello", arguments={"name": "Ada"}), ctx)
    assert result.as_text() == "Hello, Ada!" and not result.is_error


async def test_plugin_that_fails_at_import_is_named_and_skipped(installed_hello):
    pm = PluginManager()
    pm.load_entry_points()
    failed = {f.name: f for f in pm.failures}
    assert "hello_broken" in failed
    assert failed["hello_broken"].stage == "import"
    assert (
        "RuntimeError: roost_hello_plugin.broken refuses to import" in failed["hello_broken"].error
    )
    assert "hello_broken" not in pm.loaded
    assert {"hello", "tools"} <= set(pm.loaded)  # the others still load


def test_uninstalled_plugin_is_gone_again():
    pm = PluginManager()
    pm.load_entry_points()
    assert "hello" not in pm.loaded
    assert "hello_broken" not in {f.name for f in pm.failures}


def test_broken_entry_point_is_skipped_without_installing_anything(monkeypatch, tmp_path):
    # The same guarantee without pip: a distribution on sys.path whose entry point's module
    # raises at import (it does not exist).
    dist = tmp_path / "roost_exploding_for_tests-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: roost-exploding-for-tests\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nexploding = roost_no_such_module_for_tests\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = PluginManager()
    pm.load_entry_points()
    assert [f.name for f in pm.failures if f.name == "exploding"] == ["exploding"]
    assert "ModuleNotFoundError" in next(f.error for f in pm.failures if f.name == "exploding")
    assert "tools" in pm.loaded

"""``KernelAPI`` is what a plugin may use of the kernel; a booted ``Kernel`` has all of it."""

from __future__ import annotations

import inspect

from roost.kernel import (
    Kernel,
    KernelAPI,
    PluginManager,
    default_config,
    hookimpl,
    open_kernel,
    parse_manifest,
)


def _members(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


async def test_a_booted_kernel_has_every_member_of_the_protocol(tmp_path):
    manifest = parse_manifest(
        {"name": "a", "description": "A", "model": {"provider": "scripted", "name": "echo"}}
    )
    async with open_kernel(default_config(home=tmp_path), agents=[manifest]) as kernel:
        missing = sorted(name for name in _members(KernelAPI) if not hasattr(kernel, name))
        assert missing == []
        assert kernel.provider_for("a") is not None and kernel.provider_for("nobody") is None


def _parameters(function: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_protocol_methods_take_what_the_kernel_methods_take():
    for name in _members(KernelAPI):
        declared = inspect.getattr_static(KernelAPI, name)
        if not isinstance(declared, property):
            assert _parameters(declared) == _parameters(getattr(Kernel, name)), name


def test_call_each_answers_plugin_by_plugin_and_records_one_that_raises():
    class Good:
        @hookimpl
        def roost_mcp_servers(self, config):
            return [("server", config)]

    class Broken:
        @hookimpl
        def roost_mcp_servers(self, config):
            raise RuntimeError("no servers today")

    pm = PluginManager()
    pm.register_named("good", Good())
    pm.register_named("broken", Broken())
    assert pm.call_each("roost_mcp_servers", config="cfg", ignored=1) == [
        ("good", [("server", "cfg")])
    ]
    assert [(f.name, f.error) for f in pm.failures] == [
        ("broken", "roost_mcp_servers raised RuntimeError: no servers today")
    ]


async def test_two_kernels_in_one_process_keep_their_plugins_state_apart(tmp_path):
    from roost.plugins.mcp._client_plugin import manager_for

    async with (
        open_kernel(default_config(home=tmp_path / "a")) as a,
        open_kernel(default_config(home=tmp_path / "b")) as b,
    ):
        assert a.extensions is not b.extensions
        assert manager_for(a).kernel is a and manager_for(b).kernel is b
    assert manager_for(a) is None  # its service stopped with its kernel

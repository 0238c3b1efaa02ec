"""Routes contributed through the roost_http_routes hook."""

import json

import pytest
from http_fakes import serving
from quart import request, websocket
from roost.kernel import RoostError, RouteDescriptor, hookimpl
from trio_websocket import open_websocket_url

KEY = "route-test-key"


async def hello():
    return {"hello": "world"}


async def echo():
    data = await request.get_json()
    return {"echo": data}


async def fails():
    raise RoostError("the plugin could not do it")


async def ws_echo():
    await websocket.accept()
    message = await websocket.receive()
    await websocket.send("echo:" + message)


class GoodPlugin:
    @hookimpl
    def roost_http_routes(self, kernel):
        assert kernel is not None
        return [
            RouteDescriptor("/plugin/hello", hello, public=True),
            RouteDescriptor("/plugin/echo", echo, methods=("POST",)),
            RouteDescriptor("/plugin/fails", fails),
            RouteDescriptor("/plugin/ws", ws_echo, websocket=True),
            RouteDescriptor("/plugin/opts", hello, methods=("OPTIONS",)),
        ]


class BrokenPlugin:
    @hookimpl
    def roost_http_routes(self, kernel):
        raise RuntimeError("boom")


class SloppyPlugin:
    @hookimpl
    def roost_http_routes(self):  # a hookimpl may take fewer arguments
        return [
            RouteDescriptor("/health", hello),  # collides with the daemon's own route
            RouteDescriptor("no-slash", hello),
            {"path": "/dict"},
            RouteDescriptor("/plugin/extra", hello, public=True),
        ]


@pytest.fixture
def kernel_with_plugins(make_kernel):
    kernel = make_kernel(api_key=KEY)
    kernel.plugins.register(GoodPlugin(), name="good")
    kernel.plugins.register(BrokenPlugin(), name="broken")
    kernel.plugins.register(SloppyPlugin(), name="sloppy")
    return kernel


async def test_plugin_routes_are_served_with_auth_unless_public(kernel_with_plugins):
    auth = {"Authorization": f"Bearer {KEY}"}
    async with serving(kernel_with_plugins) as client:
        public = await client.get("/plugin/hello")
        extra = await client.get("/plugin/extra")
        private_no_key = await client.post("/plugin/echo", json={"a": 1})
        private = await client.post("/plugin/echo", json={"a": 1}, headers=auth)
        wrong_method = await client.get("/plugin/echo", headers=auth)
        failing = await client.get("/plugin/fails", headers=auth)
        # A plugin's own OPTIONS view is not a CORS preflight: it needs the key.
        options_no_key = await client.options(
            "/plugin/opts", headers={"Access-Control-Request-Method": "GET"}
        )
        options = await client.options("/plugin/opts", headers=auth)
        health = await client.get("/health")
    assert public.json() == {"hello": "world"}
    assert extra.status_code == 200
    assert private_no_key.status_code == 401
    assert private.json() == {"echo": {"a": 1}}
    assert wrong_method.status_code == 405
    assert failing.status_code == 500
    assert failing.json() == {
        "error": {"code": "roost_error", "message": "the plugin could not do it"}
    }
    assert health.json()["status"] == "ok"  # the daemon's /health kept its place
    assert options_no_key.status_code == 401
    assert options.json() == {"hello": "world"}


async def test_plugin_websocket_route(kernel_with_plugins):
    async with serving(kernel_with_plugins) as client:
        url = client.roost_url.replace("http://", "ws://") + f"/plugin/ws?token={KEY}"
        async with open_websocket_url(url) as ws:
            await ws.send_message("hi")
            assert await ws.get_message() == "echo:hi"


async def test_bad_plugin_routes_are_recorded_as_failures_not_fatal(kernel_with_plugins):
    async with serving(kernel_with_plugins):
        pass
    failures = [f for f in kernel_with_plugins.plugins.failures if f.stage == "routes"]
    by_plugin = {}
    for failure in failures:
        by_plugin.setdefault(failure.name, []).append(failure.error)
    assert set(by_plugin) == {"broken", "sloppy"}
    assert "RuntimeError: boom" in by_plugin["broken"][0]
    sloppy = json.dumps(by_plugin["sloppy"])
    assert "/health collides" in sloppy
    assert "must start with '/'" in sloppy
    assert "expected roost.kernel.RouteDescriptor" in sloppy

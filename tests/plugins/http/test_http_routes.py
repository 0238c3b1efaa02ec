"""Routes contributed through the roost_http_routes hook."""

import json

import pytest
from http_fakes import serving
from roost.kernel import RoostError, RouteDescriptor, hookimpl
from roost.plugins.http import PlainResponse

KEY = "route-test-key"


async def hello(request):
    return PlainResponse.json({"hello": "world"})


async def echo(request):
    return PlainResponse.json({"echo": json.loads(request.body)})


async def fails(request):
    raise RoostError("the plugin could not do it")


async def not_a_response(request):
    return {"a dict": "is not a PlainResponse"}


class GoodPlugin:
    @hookimpl
    def roost_http_routes(self, kernel):
        assert kernel is not None
        return [
            RouteDescriptor("/plugin/hello", hello, public=True),
            RouteDescriptor("/plugin/echo", echo, methods=("POST",)),
            RouteDescriptor("/plugin/fails", fails),
            RouteDescriptor("/plugin/opts", hello, methods=("OPTIONS",)),
            RouteDescriptor("/plugin/wrong", not_a_response),
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
        # A route without OPTIONS answers a preflight itself, without the key.
        preflight = await client.options(
            "/plugin/echo", headers={"Access-Control-Request-Method": "POST"}
        )
        wrong = await client.get("/plugin/wrong", headers=auth)
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
    assert preflight.status_code == 200 and set(preflight.headers["allow"].split(", ")) == {
        "OPTIONS",
        "POST",
    }
    assert wrong.status_code == 500 and wrong.json()["error"]["code"] == "internal_error"


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


def test_a_route_has_one_handler_type():
    """Regression: routes could carry two handlers (a Quart view and a ``fast_handler``)."""
    import attrs

    assert [f.name for f in attrs.fields(RouteDescriptor) if "handler" in f.name] == ["handler"]
    assert "websocket" not in attrs.fields_dict(RouteDescriptor)

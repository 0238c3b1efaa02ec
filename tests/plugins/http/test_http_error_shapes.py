"""Trailing slashes and per-route error shapes (``RouteDescriptor.render_error``) in the HTTP
layer, on a real daemon socket: plugin routes, and the paths and methods no route serves."""

import json

import pytest
import trio
from http_fakes import serving
from roost.kernel import RouteDescriptor, hookimpl
from roost.plugins.http import PlainResponse, create_app

KEY = "s3cret-key"


def shaped(status: int, code: str, message: str) -> tuple[bytes, str]:
    """A protocol's error shape, made up for the test: easy to tell from roost's own."""
    return json.dumps(
        {"proto_error": {"status": status, "code": code, "message": message}}
    ).encode(), "application/x-proto"


async def handler(req, **args):
    if req.headers.get("x-boom"):
        raise RuntimeError("kaboom: secret detail")
    return PlainResponse.json({"path": req.path, "args": args})


class ProtoPlugin:
    @hookimpl
    def roost_http_routes(self, kernel):
        return [
            RouteDescriptor("/proto/<name>/rpc", handler, ("POST",), render_error=shaped),
            RouteDescriptor("/slashed/", handler, ("POST",), render_error=shaped),
            RouteDescriptor("/plain", handler, ("POST",)),
        ]


def make(make_kernel, **http):
    kernel = make_kernel(**http)
    kernel.plugins.register(ProtoPlugin(), name="proto")
    return kernel


def proto(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/x-proto"
    body = response.json()["proto_error"]
    assert (body["status"], body["code"]) == (status, code), body
    return body


async def test_trailing_slash_serves_the_same_handler(make_kernel):
    async with serving(make(make_kernel)) as client:
        plain = await client.post("/proto/a/rpc")
        slashed = await client.post("/proto/a/rpc/")
        # registered with a slash, served with and without one
        registered_bare = await client.post("/slashed")
        registered_slashed = await client.post("/slashed/")
        api = await client.get("/api/agents/")
        health = await client.get("/health/")
    assert plain.json() == slashed.json() == {"path": "/proto/a/rpc", "args": {"name": "a"}}
    assert registered_bare.json() == registered_slashed.json() == {"path": "/slashed", "args": {}}
    assert api.status_code == 200 and [a["name"] for a in api.json()["agents"]] == ["echo", "coder"]
    # never a redirect
    assert all(
        r.status_code == 200
        for r in (plain, slashed, registered_bare, registered_slashed, api, health)
    )


async def test_daemon_errors_on_a_route_use_its_render_error(make_kernel, caplog):
    async with serving(
        make(make_kernel, api_key=KEY, max_body_bytes=2048, allowed_origins=("http://ok.example",))
    ) as client:
        auth = {"Authorization": f"Bearer {KEY}"}
        unauthorized = await client.post("/proto/a/rpc/")
        forbidden = await client.post(
            "/proto/a/rpc", headers={**auth, "Origin": "http://evil.example"}
        )
        too_large = await client.post("/proto/a/rpc", headers=auth, content=b"x" * 5000)
        crash = await client.post("/proto/a/rpc", headers={**auth, "X-Boom": "1"})
        no_route = await client.post("/proto/a/rpc/extra", headers=auth)
        wrong_method = await client.get("/proto/a/rpc", headers=auth)
        unauthorized_slashed = await client.post("/slashed")
        # routes without render_error keep roost's shape
        plain_crash = await client.post("/plain", headers={**auth, "X-Boom": "1"})
        api_missing = await client.get("/api/nothing-here", headers=auth)
    proto(unauthorized, 401, "unauthorized")
    assert unauthorized.headers["www-authenticate"] == 'Bearer realm="roost"'
    proto(forbidden, 403, "origin_forbidden")
    assert "http.max_body_bytes" in proto(too_large, 413, "body_too_large")["message"]
    body = proto(crash, 500, "internal_error")
    assert "kaboom" not in body["message"]
    proto(no_route, 404, "not_found")
    proto(wrong_method, 405, "method_not_allowed")
    assert "POST" in wrong_method.headers["allow"]
    proto(unauthorized_slashed, 401, "unauthorized")
    assert (
        plain_crash.status_code == 500 and plain_crash.json()["error"]["code"] == "internal_error"
    )
    assert api_missing.status_code == 404 and api_missing.json()["error"]["code"] == "not_found"


async def test_rate_limit_answer_uses_render_error(make_kernel):
    kernel = make(make_kernel, rate_limit_per_s=0.001, rate_limit_burst=1, rate_limit_loopback=True)
    async with serving(kernel) as client:
        assert (await client.post("/proto/a/rpc")).status_code == 200
        limited = await client.post("/proto/a/rpc")
        limited_slashed = await client.post("/slashed/")
    for answer in (limited, limited_slashed):
        proto(answer, 429, "rate_limited")
        assert int(answer.headers["retry-after"]) >= 1


async def test_a_chunked_body_over_the_limit_uses_render_error(make_kernel):
    kernel = make(make_kernel, max_body_bytes=2048)
    async with serving(kernel) as client:
        port = int(client.roost_url.rsplit(":", 1)[1])
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            chunk = b"x" * 4096
            await stream.send_all(
                b"POST /proto/a/rpc/ HTTP/1.1\r\nHost: localhost\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(chunk)
                + chunk
                + b"\r\n0\r\n\r\n"
            )
            data = b""
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}}"):
                more = await stream.receive_some(65536)
                if not more:
                    break
                data += more
            await stream.aclose()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert b"content-type: application/x-proto" in head
    assert json.loads(body)["proto_error"]["code"] == "body_too_large"


def test_a_failing_renderer_falls_back_to_roosts_shape(caplog):
    from roost.plugins.http._common import Refusal, render_refusal

    def broken(status, code, message):
        raise ValueError("renderer bug")

    def wrong_type(status, code, message):
        return {"not": "bytes"}, "application/json"

    refusal = Refusal(429, {"code": "rate_limited", "message": "slow down"}, {"Retry-After": "1"})
    for renderer in (broken, wrong_type):
        body, content_type = render_refusal(refusal, renderer)
        assert content_type == "application/json"
        assert json.loads(body) == {"error": {"code": "rate_limited", "message": "slow down"}}
    assert "render_error" in caplog.text


def test_a_path_no_route_matches_takes_the_nearest_routes_shape():
    from roost.plugins.http._common import ErrorShapes

    def jsonrpc(*_):
        return b"rpc", "x/rpc"

    def rest(*_):
        return b"rest", "x/rest"

    shapes = ErrorShapes()
    shapes.by_endpoint.update({"card": rest, "rpc": jsonrpc, "rest": rest, "mcp": jsonrpc})
    shapes.set_routes(
        [
            ("/api/agents/<name>", {"GET"}, "api"),
            ("/a2a/agents/<name>/.well-known/agent-card.json", {"GET"}, "card"),
            ("/a2a/agents/<name>/jsonrpc", {"POST"}, "rpc"),
            ("/a2a/agents/<name>/rest/<path:rest>", {"GET", "POST"}, "rest"),
            ("/mcp", {"GET", "POST", "DELETE"}, "mcp"),
        ]
    )
    assert shapes.for_request("rpc", "POST", "/anything") is jsonrpc  # a matched route: its own
    assert (
        shapes.for_request(None, "POST", "/a2a/agents/w/bogus") is jsonrpc
    )  # method decides a tie
    assert shapes.for_request(None, "GET", "/a2a/agents/w/bogus") is rest  # first registered
    assert shapes.for_request(None, "GET", "/a2a/agents/w/jsonrpc/") is jsonrpc  # 405
    assert shapes.for_request(None, "POST", "/mcp/extra") is jsonrpc
    assert shapes.for_request(None, "GET", "/api/agents/x/y") is None  # nearest has no renderer
    assert shapes.for_request(None, "GET", "/elsewhere") is None


def test_render_error_must_be_callable(make_kernel):
    class Bad:
        @hookimpl
        def roost_http_routes(self, kernel):
            return [RouteDescriptor("/bad", handler, ("POST",), render_error="not a function")]

    kernel = make_kernel()
    kernel.plugins.register(Bad(), name="bad")
    kernel.plugins.failures = []
    app = create_app(kernel)
    assert not [r for r in app.url_map.iter_rules() if r.rule == "/bad"]
    assert any("render_error is not callable" in f.error for f in kernel.plugins.failures)


@pytest.mark.parametrize("path", ["/", "/health", "/a/b"])
def test_paths_without_a_trailing_slash_are_routed_unchanged(path):
    from roost.plugins.http._common import canonical_path

    assert canonical_path(path) == path
    assert canonical_path(path.rstrip("/") + "//") == (path.rstrip("/") or "/")

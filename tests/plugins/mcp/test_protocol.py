"""The shared sans-I/O protocol core: versions, meta, errors, cursors."""

from __future__ import annotations

import pytest
from roost.kernel import JsonRpcError
from roost.plugins.mcp import _protocol as p


def test_version_negotiation_and_eras():
    assert p.negotiate_version("2025-03-26") == "2025-03-26"
    assert (
        p.negotiate_version("2026-07-28") == p.LATEST_HANDSHAKE_VERSION
    )  # not a handshake version
    assert p.negotiate_version(None) == p.LATEST_HANDSHAKE_VERSION
    assert p.SUPPORTED_VERSIONS[0] == "2026-07-28"
    assert p.is_stateless_version("2026-07-28") and not p.is_stateless_version("2025-11-25")


def test_request_era_and_meta_reading():
    meta = p.stateless_meta(
        {"name": "c", "version": "1"}, {"sampling": {}}, log_level="info", progress_token=7
    )
    params = {"_meta": meta}
    assert p.request_era(params) == p.ERA_STATELESS
    assert p.request_era({"_meta": "junk"}) == p.ERA_HANDSHAKE
    read = p.read_request_meta(params)
    assert (
        read.protocol_version == "2026-07-28"
        and read.progress_token == 7
        and read.log_level == "info"
    )
    p.check_stateless_meta(read)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"_meta": []}, "params._meta"),
        ({"_meta": {p.META_PROTOCOL_VERSION: 5}}, "protocolVersion"),
        ({"_meta": {"progressToken": True}}, "progressToken"),
        ({"_meta": {p.META_LOG_LEVEL: "loud"}}, "logLevel"),
        ({"_meta": {p.META_CLIENT_INFO: "me"}}, "clientInfo"),
        ("text", "params"),
    ],
)
def test_malformed_meta_is_invalid_params_naming_the_field(params, field):
    with pytest.raises(JsonRpcError) as info:
        p.read_request_meta(params)
    assert info.value.code == -32602 and field in info.value.message


def test_stateless_checks_version_then_capabilities():
    with pytest.raises(JsonRpcError) as info:
        p.check_stateless_meta(p.RequestMeta("1999-01-01", client_capabilities={}))
    assert info.value.code == p.UNSUPPORTED_PROTOCOL_VERSION
    assert info.value.data == {"supported": list(p.SUPPORTED_VERSIONS), "requested": "1999-01-01"}
    with pytest.raises(JsonRpcError) as info:
        p.check_stateless_meta(p.RequestMeta("2026-07-28"))
    assert info.value.code == -32602 and "clientCapabilities" in info.value.message


def test_cursors_are_opaque_stable_and_checked():
    items = [{"name": n} for n in ("b", "a", "d", "c")]
    page, cursor = p.paginate(items, None, page_size=3)
    assert [i["name"] for i in page] == ["a", "b", "c"]
    items.append({"name": "bb"})  # an item added before the cursor does not shift the next page
    page, cursor2 = p.paginate(items, cursor, page_size=3)
    assert [i["name"] for i in page] == ["d"] and cursor2 is None
    for bad in ("", "!!", "eyJ4IjoxfQ", 5):
        with pytest.raises(JsonRpcError) as info:
            p.decode_cursor(bad)
        assert info.value.code == -32602 and "cursor" in info.value.message


def test_header_value_encoding_round_trips():
    for value in ("us-west1", "Hello, 世界", " padded ", "line1\nline2", "=?base64?literal?="):
        encoded = p.encode_header_value(value)
        assert all(0x20 <= ord(c) < 0x7F for c in encoded)
        assert p.decode_header_value(encoded) == value
    assert p.encode_header_value("plain") == "plain"
    assert p.decode_header_value("=?base64?***?=") is None


def test_results_and_builders():
    result = p.finish_stateless_result("tools/list", {"tools": []}, {"name": "s", "version": "1"})
    assert (
        result["resultType"] == "complete"
        and result["ttlMs"] == 0
        and result["cacheScope"] == "private"
    )
    assert "ttlMs" not in p.finish_stateless_result(
        "tools/call", {"content": []}, {"name": "s", "version": "1"}
    )
    irr = p.input_required_result({"k": {"method": "roots/list", "params": {}}}, request_state="s")
    assert p.result_type(irr) == "input_required" and p.result_type({}) == "complete"
    with pytest.raises(ValueError):
        p.input_required_result({})
    assert p.log_level_allows("warning", "error") and not p.log_level_allows("warning", "info")
    assert not p.log_level_allows(None, "emergency")
    assert p.safe_tool_name("a b/c") == "a_b_c"

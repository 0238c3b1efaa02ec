"""Sans-I/O JSON-RPC 2.0: parsing, validation, building, correlation, dispatch."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roost.kernel import jsonrpc
from roost.kernel._jsonrpc import (
    DEFAULT_MAX_BYTES,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
    Batch,
    Correlator,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    LineFramer,
    Notification,
    Oversize,
    Request,
    Response,
    TooManyPending,
    UnknownResponseId,
    encode,
    error_response,
    param,
    parse,
    parse_message,
    response,
)


def raw(**fields) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **fields}).encode()


# ---- the spec's examples ------------------------------------------------------------------


def test_error_codes_are_the_standard_ones():
    assert (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR) == (
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
    )
    assert -32099 <= SERVER_ERROR <= -32000


def test_parse_request_with_positional_and_named_params():
    assert parse(b'{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}') == (
        Request("subtract", [42, 23], 1)
    )
    assert parse('{"jsonrpc":"2.0","method":"subtract","params":{"a":1},"id":"x"}') == Request(
        "subtract", {"a": 1}, "x"
    )


def test_parse_notification_has_no_id():
    msg = parse(b'{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}')
    assert msg == Notification("update", [1, 2, 3, 4, 5])


def test_null_id_is_a_request_not_a_notification():
    assert parse(raw(method="m", id=None)) == Request("m", None, None)


def test_parse_responses():
    assert parse(raw(result=19, id=1)) == Response(1, 19)
    assert parse(raw(result=None, id=2)) == Response(2, None)
    err = parse(raw(error={"code": -32601, "message": "Method not found"}, id="1"))
    assert err == ErrorResponse("1", ErrorObject(-32601, "Method not found"))
    with_data = parse(raw(error={"code": 5, "message": "m", "data": {"x": 1}}, id=None))
    assert with_data.error.data == {"x": 1} and with_data.id is None


def test_parse_accepts_decoded_objects_and_all_byte_types():
    obj = {"jsonrpc": "2.0", "method": "m", "id": 3}
    text = json.dumps(obj)
    expected = Request("m", None, 3)
    for data in (obj, text, text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert parse(data) == expected


def test_invalid_json_is_a_parse_error_with_position():
    with pytest.raises(JsonRpcError) as info:
        parse(b'{"jsonrpc": "2.0", "method": "foobar", "params": "bar", "baz]')
    assert info.value.code == PARSE_ERROR
    assert "line 1" in info.value.message and info.value.id is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   ",
        b"\xff\xfe{}",
        b'{"a": NaN}',
        b"[Infinity]",
        b'{"a": -Infinity}',
        b"\xef\xbb\xbf{}",
    ],
)
def test_non_json_and_non_standard_json_are_parse_errors(data):
    with pytest.raises(JsonRpcError) as info:
        parse(data, allow_batch=True)
    assert info.value.code == PARSE_ERROR


def test_a_number_past_pythons_digit_limit_is_a_parse_error_without_pythons_hint():
    # Regression: the error quoted Python's "use sys.set_int_max_str_digits()", which a
    # remote caller cannot act on.
    with pytest.raises(JsonRpcError) as info:
        jsonrpc.parse('{"jsonrpc": "2.0", "id": ' + "9" * 5000 + ', "method": "ping"}')
    assert info.value.code == jsonrpc.PARSE_ERROR
    assert str(info.value) == "parse error: a number has more than 4300 digits"


def test_deep_nesting_is_a_parse_error_not_a_recursion_error():
    with pytest.raises(JsonRpcError) as info:
        parse(b"[" * 100_000 + b"]" * 100_000, allow_batch=True, max_bytes=None)
    assert info.value.code == PARSE_ERROR and "nested" in info.value.message


# ---- validation names the field -----------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"method": "m", "id": 1}, "jsonrpc: missing"),
        ({"jsonrpc": "1.0", "method": "m", "id": 1}, 'jsonrpc: expected "2.0", got "1.0"'),
        ({"jsonrpc": 2.0, "method": "m", "id": 1}, 'jsonrpc: expected "2.0", got 2.0'),
        ({"jsonrpc": "2.0", "method": 1, "id": 1}, "method: expected a string, got integer"),
        ({"jsonrpc": "2.0", "method": "", "id": 1}, "method: must not be empty"),
        ({"jsonrpc": "2.0", "method": "m", "params": "bar", "id": 1}, "params: expected an object"),
        ({"jsonrpc": "2.0", "method": "m", "params": None, "id": 1}, "got null"),
        ({"jsonrpc": "2.0", "method": "m", "params": 3}, "params: expected an object or an array"),
        ({"jsonrpc": "2.0", "method": "m", "id": True}, "id: expected a string, a number or null"),
        ({"jsonrpc": "2.0", "method": "m", "id": [1]}, "id: expected a string, a number or null"),
        ({"jsonrpc": "2.0", "method": "m", "id": {"a": 1}}, "got object"),
        ({"jsonrpc": "2.0", "method": "m", "result": 1, "id": 1}, "must not carry result"),
        ({"jsonrpc": "2.0", "id": 1}, "expected a request (with method) or a response"),
        ({"jsonrpc": "2.0", "result": 1, "error": {}, "id": 1}, "either result or error"),
        ({"jsonrpc": "2.0", "result": 1}, "id: missing"),
        ({"jsonrpc": "2.0", "error": "bad", "id": 1}, "error: expected an object, got string"),
        ({"jsonrpc": "2.0", "error": {"message": "x"}, "id": 1}, "error.code: missing"),
        ({"jsonrpc": "2.0", "error": {"code": "1", "message": "x"}, "id": 1}, "error.code"),
        ({"jsonrpc": "2.0", "error": {"code": 1.5, "message": "x"}, "id": 1}, "error.code"),
        ({"jsonrpc": "2.0", "error": {"code": True, "message": "x"}, "id": 1}, "error.code"),
        ({"jsonrpc": "2.0", "error": {"code": 1}, "id": 1}, "error.message: missing"),
        ({"jsonrpc": "2.0", "error": {"code": 1, "message": 2}, "id": 1}, "error.message"),
    ],
)
def test_invalid_messages_name_the_field(obj, field):
    with pytest.raises(JsonRpcError) as info:
        parse(json.dumps(obj))
    assert info.value.code == INVALID_REQUEST
    assert field in info.value.message


def test_non_object_message_is_invalid_request():
    for data in (b"1", b'"text"', b"null", b"true"):
        with pytest.raises(JsonRpcError, match="expected a JSON-RPC object") as info:
            parse(data)
        assert info.value.code == INVALID_REQUEST


def test_error_keeps_the_request_id_when_it_was_readable():
    with pytest.raises(JsonRpcError) as info:
        parse(raw(method=5, id=77))
    assert info.value.id == 77
    assert info.value.to_response().id == 77
    with pytest.raises(JsonRpcError) as bad_id:
        parse(raw(method="m", id=[1]))
    assert bad_id.value.id is None


def test_float_error_code_that_is_an_integer_is_tolerated():
    assert parse(raw(error={"code": -32000.0, "message": "x"}, id=1)).error.code == -32000


# ---- batches and size ---------------------------------------------------------------------


def test_batch_refused_unless_allowed():
    data = b'[{"jsonrpc": "2.0", "method": "a", "id": 1}]'
    with pytest.raises(JsonRpcError, match="batches") as info:
        parse(data)
    assert info.value.code == INVALID_REQUEST
    assert parse(data, allow_batch=True) == Batch((Request("a", None, 1),))


def test_empty_batch_is_one_invalid_request():
    with pytest.raises(JsonRpcError, match="empty batch") as info:
        parse(b"[]", allow_batch=True)
    assert info.value.code == INVALID_REQUEST


def test_batch_items_are_validated_one_by_one():
    batch = parse(
        b'[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},'
        b'{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},'
        b'{"foo": "boo"}, 1,'
        b'{"jsonrpc": "2.0", "method": 3, "id": 9}]',
        allow_batch=True,
    )
    assert isinstance(batch, Batch)
    first, second, third, fourth, fifth = batch.items
    assert first == Request("sum", [1, 2, 4], "1")
    assert second == Notification("notify_hello", [7])
    assert isinstance(third, JsonRpcError) and "[2].jsonrpc: missing" in third.message
    assert isinstance(fourth, JsonRpcError) and "[3]: expected a JSON-RPC object" in fourth.message
    assert isinstance(fifth, JsonRpcError) and "[4].method" in fifth.message and fifth.id == 9


def test_invalid_json_batch_is_a_single_parse_error():
    with pytest.raises(JsonRpcError) as info:
        parse(
            b'[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},{"jsonrpc"',
            allow_batch=True,
        )
    assert info.value.code == PARSE_ERROR


def test_size_limit_names_the_limit():
    big = raw(method="m", params={"x": "a" * 2000}, id=1)
    with pytest.raises(JsonRpcError, match=r"over the limit of 1000 \(max_bytes\)") as info:
        parse(big, max_bytes=1000)
    assert info.value.code == INVALID_REQUEST
    # The limit is in bytes, also for text: 600 three-byte characters are 1800 bytes.
    with pytest.raises(JsonRpcError, match="max_bytes"):
        parse(
            json.dumps({"jsonrpc": "2.0", "method": "€" * 600}, ensure_ascii=False), max_bytes=1000
        )
    assert parse(big, max_bytes=None) == parse(big)
    assert DEFAULT_MAX_BYTES >= 1024 * 1024


# ---- building and encoding ----------------------------------------------------------------


def test_to_dict_and_encode_round_trip():
    messages = [
        Request("m", {"a": [1, 2]}, 1),
        Request("m", None, "abc"),
        Notification("n", [1]),
        Notification("n"),
        response(5, {"ok": True}),
        error_response(None, PARSE_ERROR, "Parse error"),
        error_response("7", -32001, "Task not found", {"taskId": "t"}),
    ]
    for message in messages:
        assert parse(encode(message)) == message
    assert json.loads(encode(messages)) == [m.to_dict() for m in messages]
    assert b'"params"' not in encode(Notification("n"))
    assert b'"data"' not in encode(error_response(1, 1, "x"))
    assert encode(Response(1, "é")) == '{"jsonrpc":"2.0","id":1,"result":"é"}'.encode()


def test_encode_refuses_values_that_are_not_json():
    with pytest.raises(JsonRpcError) as info:
        encode(Response(1, {"x": object()}))
    assert info.value.code == INTERNAL_ERROR
    with pytest.raises(JsonRpcError):
        encode(Response(1, float("nan")))


def test_encode_escapes_lone_surrogates_instead_of_failing():
    data = encode(Request("m", {"text": "a\ud800"}, 1))
    assert json.loads(data)["params"]["text"] == "a\ud800"


def test_a_lone_surrogate_in_the_method_or_id_is_an_invalid_request_naming_it():
    # Regression (issue 15): echoed in the answer, it made the server fail to encode it (500).
    with pytest.raises(
        JsonRpcError, match=r"^method: contains a lone surrogate \(U\+D800\)"
    ) as info:
        parse(b'{"jsonrpc":"2.0","method":"\\ud800","id":1}')
    assert info.value.code == INVALID_REQUEST and info.value.id == 1
    with pytest.raises(JsonRpcError, match=r"^id: contains a lone surrogate \(U\+DFFF\)") as info:
        parse(b'{"jsonrpc":"2.0","method":"m","id":"\\udfff"}')
    assert info.value.code == INVALID_REQUEST and info.value.id is None


def test_error_response_to_exception():
    exc = error_response(3, INVALID_PARAMS, "params.x: bad", {"field": "x"}).to_exception()
    assert (exc.code, exc.message, exc.data, exc.id) == (
        INVALID_PARAMS,
        "params.x: bad",
        {"field": "x"},
        3,
    )


# ---- params helper ------------------------------------------------------------------------


def test_param_checks_types_and_names_the_field():
    params = {"name": "x", "count": 3, "ratio": 2, "flag": True, "obj": {}, "items": []}
    assert param(params, "name", str) == "x"
    assert param(params, "ratio", float) == 2
    assert param(params, "obj", dict) == {}
    assert param(params, "missing", str, default="d") == "d"
    assert param(None, "missing", int, default=None) is None
    with pytest.raises(
        JsonRpcError, match=r"params\.name: expected an integer, got string"
    ) as info:
        param(params, "name", int)
    assert info.value.code == INVALID_PARAMS
    with pytest.raises(JsonRpcError, match=r"params\.flag: expected an integer, got boolean"):
        param(params, "flag", int)
    with pytest.raises(JsonRpcError, match=r"params\.missing: required \(a string\)"):
        param(params, "missing", str)
    with pytest.raises(JsonRpcError, match="params: expected an object with 'name', got array"):
        param([1, 2], "name", str)
    assert param(params, "count", (str, int)) == 3


# ---- correlator ---------------------------------------------------------------------------


def test_correlator_allocates_unique_ids_and_matches_responses():
    corr = Correlator()
    first = corr.new_request("a", {"x": 1})
    second = corr.new_request("b")
    assert first.id != second.id and len(corr) == 2 and first.id in corr
    assert corr.feed(Response(second.id, "ok")) is second
    assert corr.feed(error_response(first.id, -1, "no")) is first
    assert len(corr) == 0


def test_correlator_reports_unknown_and_repeated_ids():
    corr = Correlator()
    req = corr.new_request("a")
    corr.feed(Response(req.id, 1))
    with pytest.raises(UnknownResponseId, match="matches no pending request") as info:
        corr.feed(Response(req.id, 1))
    assert isinstance(info.value, JsonRpcError) and info.value.id == req.id
    with pytest.raises(UnknownResponseId):
        corr.feed(Response("never", 1))
    with pytest.raises(UnknownResponseId, match="null id.*-32700: Parse error"):
        corr.feed(error_response(None, PARSE_ERROR, "Parse error"))


def test_correlator_forget_after_a_timeout():
    corr = Correlator()
    req = corr.new_request("slow")
    assert corr.forget(req.id) is req
    assert corr.forget(req.id) is None
    with pytest.raises(UnknownResponseId):
        corr.feed(Response(req.id, "late"))
    reqs = [corr.new_request("x") for _ in range(3)]
    assert corr.forget_all() == reqs and len(corr) == 0


def test_correlator_is_bounded():
    corr = Correlator(max_pending=2)
    corr.new_request("a")
    corr.new_request("b")
    with pytest.raises(TooManyPending, match="max_pending=2"):
        corr.new_request("c")


def test_correlator_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_pending"):
        Correlator(max_pending=0)
    corr = Correlator()
    with pytest.raises(ValueError, match="method"):
        corr.new_request("")
    with pytest.raises(ValueError, match="params"):
        corr.new_request("m", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="message"):
        corr.feed(Request("m", None, 1))  # type: ignore[arg-type]


def test_correlator_round_trip_through_the_wire():
    corr = Correlator()
    req = corr.new_request("echo", ["hi"])
    wire = encode(req)
    received = parse(wire)
    answer = parse(encode(response(received.id, received.params)))
    assert corr.feed(answer) is req


# ---- line framing (NDJSON) ------------------------------------------------------------------


def test_line_framer_joins_chunks_drops_cr_and_skips_blank_lines():
    framer = LineFramer(max_bytes=100)
    assert framer.feed(b'{"a":') == [] and framer.pending
    assert framer.feed(b'1}\r\n{"b":2}\n\n  \r\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert framer.feed(b":3}\n") == [b'{"c":3}'] and not framer.pending
    text = b'{"x":1}\r\n\n{"y":2}\n'
    for cut in range(len(text) + 1):  # wherever the chunks are cut, CR LF included
        framer = LineFramer()
        assert framer.feed(text[:cut]) + framer.feed(text[cut:]) == [b'{"x":1}', b'{"y":2}'], cut


def test_line_framer_reports_an_oversize_line_in_its_place_and_reads_on():
    framer = LineFramer(max_bytes=10)
    assert framer.feed(b"ok\n" + b"x" * 8) == [b"ok"]
    assert framer.feed(b"y" * 8) == [] and framer.pending  # over the limit: skipped, not held
    assert framer.feed(b"zz\nfine\n") == [Oversize(19, 10), b"fine"]
    assert framer.feed(b"0123456789A\r\n0123456789\r\n") == [Oversize(11, 10), b"0123456789"]
    with pytest.raises(ValueError, match="max_bytes"):
        LineFramer(max_bytes=0)


def test_line_framer_is_linear_in_the_bytes_fed():
    # Each byte is searched once: a long line fed in small chunks costs as many calls of
    # bytes.find as chunks, not a rescan of everything held (which grew quadratically).
    counted = []

    class Chunk(bytes):
        def find(self, *args):
            counted.append(len(self) - (args[1] if len(args) > 1 else 0))
            return super().find(*args)

    framer = LineFramer(max_bytes=2 << 20)
    line = b"x" * (1 << 20)
    for i in range(0, len(line), 4096):
        assert framer.feed(Chunk(line[i : i + 4096])) == []
    assert framer.feed(Chunk(b"\n")) == [line]
    assert sum(counted) <= len(line) + 2 * 4096


# ---- properties ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
ids = st.none() | st.integers() | st.text(max_size=10)
params = (
    st.none()
    | st.lists(json_values, max_size=4)
    | st.dictionaries(st.text(max_size=8), json_values, max_size=4)
)
methods = st.text(min_size=1, max_size=20)
messages = st.one_of(
    st.builds(Request, methods, params, ids),
    st.builds(Notification, methods, params),
    st.builds(Response, ids, json_values),
    st.builds(
        ErrorResponse,
        ids,
        st.builds(ErrorObject, st.integers(-(2**31), 2**31), st.text(max_size=20), json_values),
    ),
)
# Objects shaped like messages, with arbitrary values in the known fields.
message_like = st.dictionaries(
    st.sampled_from(["jsonrpc", "method", "params", "id", "result", "error", "extra"]),
    json_values
    | st.just("2.0")
    | st.fixed_dictionaries({"code": json_values, "message": json_values}),
    max_size=6,
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=200))
def test_parse_never_raises_anything_else_on_bytes(data):
    try:
        parse(data, allow_batch=True)
    except JsonRpcError:
        pass


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(max_size=200))
def test_parse_never_raises_anything_else_on_text(data):
    for allow_batch in (False, True):
        try:
            parse(data, allow_batch=allow_batch, max_bytes=100)
        except JsonRpcError:
            pass


@settings(max_examples=300, deadline=None, database=None)
@given(json_values | message_like | st.lists(message_like, max_size=4))
def test_parse_never_raises_anything_else_on_json_values(value):
    for data in (value, json.dumps(value)):
        try:
            result = parse(data, allow_batch=True)
        except JsonRpcError as exc:
            assert exc.code in (PARSE_ERROR, INVALID_REQUEST)
            assert exc.message
        else:
            assert isinstance(result, (Batch, Request, Notification, Response, ErrorResponse))


@settings(max_examples=200, deadline=None, database=None)
@given(messages)
def test_encode_then_parse_is_identity(message):
    assert parse(encode(message)) == message
    assert parse_message(message.to_dict()) == message


@settings(max_examples=300, deadline=None, database=None)
@given(json_values | st.floats() | st.text(max_size=20))
def test_dumps_writes_what_json_dumps_writes(value):
    for allow_nan in (False, True):
        try:
            expected = json.dumps(
                value, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan
            )
        except ValueError as exc:
            with pytest.raises(ValueError, match="Out of range float"):
                jsonrpc.dumps(value, allow_nan=allow_nan)
            assert "Out of range float" in str(exc)
        else:
            assert jsonrpc.dumps(value, allow_nan=allow_nan) == expected


def test_dumps_refuses_what_is_not_json():
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        jsonrpc.dumps({"a": object()})
    loop: list = []
    loop.append(loop)
    with pytest.raises(RecursionError):
        jsonrpc.dumps(loop)


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.text(max_size=60)
    | json_values.map(json.dumps)
    | json_values.map(lambda v: f" {json.dumps(v)}\n")
)
def test_loads_reads_what_json_loads_reads(text):
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as got:
            jsonrpc.loads(text)
        assert (got.value.msg, got.value.pos) == (exc.msg, exc.pos)
    else:
        assert repr(jsonrpc.loads(text)) == repr(expected)


def test_jsonrpc_namespace_is_exported():
    assert jsonrpc.parse is parse and jsonrpc.LineFramer is LineFramer
    assert not hasattr(jsonrpc, "Dispatcher")  # unused: MCP and A2A dispatch their own methods

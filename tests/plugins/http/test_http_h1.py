"""The fast lane's sans-I/O HTTP/1.1 request parser and response writer."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roost.plugins.http._h1 import (
    CHUNKED_OVERHEAD,
    H2_PREFACE,
    MAX_CHUNK_LINE,
    ParseError,
    RequestParser,
    error_response,
    render_response,
)

LIMIT = 1000
CHUNKED = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"


def parse_all(data: bytes, *, limit: int = LIMIT, split: int | None = None):
    """Feed ``data`` (in pieces of ``split`` bytes) and return every (head, body) parsed."""
    parser = RequestParser()
    out = []
    pieces = [data] if not split else [data[i : i + split] for i in range(0, len(data), split)]
    for piece in pieces:
        parser.feed(piece)
        while (head := parser.head()) is not None:
            body = parser.body(limit)
            if body is None:
                break
            out.append((head, body))
            parser.finish()
    return out, parser


def refused(data: bytes, *, limit: int = LIMIT) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_all(data, limit=limit)
    return info.value


def test_a_get_request_with_query_and_percent_encoded_path():
    [(head, body)], _ = parse_all(b"GET /a%20b/c?x=1&y=%2F HTTP/1.1\r\nHost: h\r\nX-Thing:  v  \r\n\r\n")
    assert (head.method, head.path, head.query, head.http_version) == ("GET", "/a b/c", b"x=1&y=%2F", "1.1")
    assert head.target == "/a%20b/c?x=1&y=%2F"
    assert head.headers.get("x-thing") == "v" and head.headers.get("X-THING") == "v"
    assert head.keep_alive and not head.has_body and body == b""


def test_content_length_body_and_pipelined_requests_byte_by_byte():
    one = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
    two = b"GET /q HTTP/1.1\r\nHost: h\r\n\r\n"
    for split in (None, 1, 3, 7):
        requests, parser = parse_all(one + two + b"GET /partial HT", split=split)
        assert [(h.path, b) for h, b in requests] == [("/p", b"hello"), ("/q", b"")]
        assert parser.buffered == b"GET /partial HT"


def test_chunked_body_with_extensions_and_trailers_in_any_split():
    data = (
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=v\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
        b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n"
    )
    for split in (None, 1, 2, 5, 11):
        requests, parser = parse_all(data, split=split)
        assert [(h.path, b) for h, b in requests] == [("/c", b"hello world"), ("/after", b"")]
        assert requests[0][0].chunked and parser.buffered == b""


def test_chunk_extension_flood_is_refused_before_the_buffer_grows():
    """Regression: tiny chunks with long extensions kept ~1000 raw bytes per decoded byte."""
    limit = 1_000_000
    # extensions over the size-line cap: 400 on the first line, with little buffered
    parser = RequestParser()
    parser.feed(CHUNKED)
    assert parser.head().chunked and parser.body(limit) is None
    with pytest.raises(ParseError) as info:
        for _ in range(1000):
            parser.feed(b"1;" + b"a" * 1000 + b"\r\nX\r\n")
            assert parser.body(limit) is None
    assert info.value.status == 400 and len(parser.buffer) < 2 * 1024
    # legal extensions just under the cap: decoded as they come, framing dropped, and 413
    # once the raw framing passes limit + CHUNKED_OVERHEAD (long before the decoded limit)
    chunk = b"1;" + b"a" * (MAX_CHUNK_LINE - 3) + b"\r\nX\r\n"
    parser = RequestParser()
    parser.feed(CHUNKED)
    parser.head()
    fed = 0
    with pytest.raises(ParseError) as info:
        while fed < 10 * (limit + CHUNKED_OVERHEAD):
            parser.feed(chunk * 64)
            fed += len(chunk) * 64
            assert parser.body(limit) is None
            assert len(parser.buffer) < len(chunk) and len(parser.buffered) < 16 * 1024
    assert info.value.status == 413
    assert fed <= limit + CHUNKED_OVERHEAD + 64 * len(chunk)


def test_valid_chunked_bodies_still_parse_with_legal_extensions_and_trailers():
    body = (
        b"4\r\nwiki\r\n"
        b"5;name\r\npedia\r\n"
        b'3 ; a=b ;c="q \\" ;d"\t;e = f\r\n in\r\n'
        b"A;ext=tok!#$%&'*+-.^_`|~\r\n chunks.xy\r\n"
        b"0;last\r\nX-Checksum: abc\r\nX-Other:\tv \r\n\r\n"
    )
    for data in (CHUNKED + body, CHUNKED + body.replace(b"0;last", b"0")):
        for split in (None, 1, 3, 13):
            [(head, got)], parser = parse_all(data + b"GET /next HTTP/1.1\r\nHost: h\r\n", split=split)
            assert head.chunked and got == b"wikipedia in chunks.xy"
            assert parser.buffered == b"GET /next HTTP/1.1\r\nHost: h\r\n"
    [(_, got)], _ = parse_all(CHUNKED + b"0\r\n\r\n")
    assert got == b""


def test_buffered_reframes_a_chunked_body_at_every_step():
    """The raw chunk framing is dropped as it is decoded, so a hand-off replays the body
    re-framed as one chunk; at every point it must parse back to the same request."""
    data = CHUNKED + b"3;x=y\r\nabc\r\n4\r\ndefg\r\n0\r\nT: v\r\n\r\n"
    for cut in range(len(CHUNKED), len(data) + 1):
        parser = RequestParser()
        parser.feed(data[:cut])
        parser.head()
        done = parser.body(LIMIT) is not None
        replay = parser.buffered + (b"" if done else data[cut:])
        [(_, got)], again = parse_all(replay)
        assert got == b"abcdefg" and again.buffered == b"", cut
    [(head, _)], parser = parse_all(data)
    assert head.chunked


def test_bare_lf_head_lines_are_accepted_like_h11_but_framing_is_unchanged():
    [(head, body)], _ = parse_all(b"POST /lf HTTP/1.1\nHost: h\nContent-Length: 2\nX: y\n\nhi")
    assert (head.path, head.headers.get("x"), body) == ("/lf", "y", b"hi")
    mixed = b"GET /m HTTP/1.1\r\nHost: h\nX: y\r\n\nGET /n HTTP/1.1\nHost: h\r\n\r\n"
    requests, parser = parse_all(mixed)
    assert [h.path for h, _ in requests] == ["/m", "/n"] and parser.buffered == b""
    assert requests[0][0].headers.get("x") == "y"
    [(head, _)], _ = parse_all(b"\n\r\nGET / HTTP/1.1\nHost: h\n\n")  # stray empty lines too
    assert head.path == "/"
    # the head ends at the first empty line, so what follows is body, never more headers
    parser = RequestParser()
    parser.feed(b"POST / HTTP/1.1\nHost: h\nContent-Length: 26\n\nTransfer-Encoding: chunked\r\n\r\n")
    assert not parser.head().chunked and parser.body(LIMIT) == b"Transfer-Encoding: chunked"
    # Content-Length / Transfer-Encoding rules are the same with LF lines
    assert refused(b"POST / HTTP/1.1\nHost: h\nContent-Length: 3\nTransfer-Encoding: chunked\n\n").status == 400
    assert refused(b"POST / HTTP/1.1\nHost: h\nContent-Length: 1\nContent-Length: 2\n\n").status == 400
    assert refused(b"GET / HTTP/1.1\nHost: h\nX: a\n folded\n\n").status == 400


def test_http2_prior_knowledge_preface_is_flagged_not_refused():
    """Regression: the HTTP/2 preface got 505; it must be recognisable for a hand-off."""
    frames = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
    for split in (None, 1, 5):
        parser = RequestParser()
        pieces = [H2_PREFACE + frames] if not split else [(H2_PREFACE + frames)[i : i + split] for i in range(0, 33, split)]
        for piece in pieces:
            parser.feed(piece)
            if (head := parser.head()) is not None:
                break
            assert len(parser.buffer) < len(H2_PREFACE)
        assert (head.method, head.http_version) == ("PRI", "2.0")
        assert parser.buffered.startswith(H2_PREFACE)
    # only as a connection's first bytes, and only the whole preface
    assert refused(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").status == 505
    _, parser = parse_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    parser.feed(H2_PREFACE)
    with pytest.raises(ParseError) as info:
        parser.head()
    assert info.value.status == 505


def test_head_does_not_consume_so_the_bytes_can_be_replayed():
    raw = b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nextra"
    parser = RequestParser()
    parser.feed(raw)
    head = parser.head()
    assert head.upgrade and parser.head() is head
    assert parser.buffered == raw


def test_stray_crlf_before_a_request_is_ignored():
    [(head, _)], _ = parse_all(b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
    assert head.path == "/"


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"GET / HTTP/1.1\r\nHost: h\r\n", True),
        (b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n", False),
        (b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive, Close\r\n", False),
        (b"GET / HTTP/1.0\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n", True),
    ],
)
def test_keep_alive_follows_the_version_and_connection_header(head, keep_alive):
    [(parsed, _)], _ = parse_all(head + b"\r\n")
    assert parsed.keep_alive is keep_alive


def test_expect_and_upgrade_are_flagged():
    [(head, _)], _ = parse_all(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n")
    assert head.expect and not head.upgrade


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        (b"hello\r\n\r\n", 400, "request line"),
        (b"GET / HTTP/1.1\rHost: h\r\n\r\n", 400, "bare CR"),
        (b"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400, "bare CR"),
        (b"GET / HTTP/1.1\r\nHost: h\r\r\n\r\n", 400, "bare CR"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\n\n", 400, "bare CR"),
        (b"\x16\x03\x01\x02\x00", 400, "not an HTTP"),
        (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "request line"),
        (b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "method"),
        (b"GET /\x01 HTTP/1.1\r\nHost: h\r\n\r\n", 400, "target"),
        (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "not supported"),
        (b"GET / HTTX/1.1\r\nHost: h\r\n\r\n", 400, "version"),
        (b"GET / HTTP/1.1\r\n\r\n", 400, "Host"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "Host"),
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400, "header line"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n  folded\r\n\r\n", 400, "header line"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400, "header line"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400, "control"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "conflicting"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1e3\r\n\r\n", 400, "Content-Length"),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "both",
        ),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "chunked"),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "chunk size"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 400, "CRLF"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000, 400, "too long"),
        (CHUNKED + b"5\nhello\r\n0\r\n\r\n", 400, "bare LF"),
        (CHUNKED + b"5\rhello\r\n0\r\n\r\n", 400, "bare CR"),
        (CHUNKED + b"5;a\rb\r\nhello\r\n", 400, "bare CR"),
        (CHUNKED + b"5\r\nhello\n0\r\n\r\n", 400, "CRLF"),
        (CHUNKED + b" 5\r\nhello\r\n", 400, "chunk size"),
        (CHUNKED + b"5;\r\nhello\r\n", 400, "chunk extension"),
        (CHUNKED + b"5;=v\r\nhello\r\n", 400, "chunk extension"),
        (CHUNKED + b"5;a b\r\nhello\r\n", 400, "chunk extension"),
        (CHUNKED + b'5;a="unterminated\r\nhello\r\n', 400, "chunk extension"),
        (CHUNKED + b"5;a=\x01\r\nhello\r\n", 400, "chunk extension"),
        (CHUNKED + b"5;a" + b"a" * 300 + b"\r\nhello\r\n", 400, "too long"),
        (CHUNKED + b"0\r\nX-T: a\n\r\n", 400, "bare LF"),
        (CHUNKED + b"0\r\nX-T: a\rb\r\n\r\n", 400, "bare CR"),
        (CHUNKED + b"0\r\nnot a trailer\r\n\r\n", 400, "trailer"),
    ],
)
def test_malformed_requests_are_refused_naming_the_problem(data, status, words):
    error = refused(data)
    assert error.status == status
    assert words.lower() in error.message.lower()


def test_oversized_heads_are_431():
    assert refused(b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 20_000).status == 431
    many = b"".join(b"X-%d: v\r\n" % i for i in range(101))
    assert refused(b"GET / HTTP/1.1\r\nHost: h\r\n" + many + b"\r\n").status == 431
    trailers = b"".join(b"T-%d: %s\r\n" % (i, b"v" * 100) for i in range(200))
    chunked = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + trailers
    assert refused(chunked).status == 431


def test_bodies_over_the_limit_are_413_before_they_arrive():
    error = refused(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n")
    assert error.status == 413 and "1000" in error.message
    chunked = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + b"200\r\n" + b"x" * 512 + b"\r\n"
    assert refused(chunked + b"200\r\n").status == 413
    assert parse_all(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000)[0]


def test_render_response_frames_the_body_and_closes_when_asked():
    data = render_response(200, [("Content-Type", "application/json")], b"{}", keep_alive=False)
    head, body = data.split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK" and body == b"{}"
    assert b"content-type: application/json" in lines and b"content-length: 2" in lines
    assert b"connection: close" in lines and any(line.startswith(b"date: ") for line in lines)
    ten = render_response(204, [], b"", http_version="1.0")
    assert b"connection: keep-alive" in ten
    with pytest.raises(ValueError, match="line break"):
        render_response(200, [("X", "a\r\nInjected: 1")], b"")


def test_error_response_is_json_and_closes():
    data = error_response(ParseError(431, "request head is larger than 16384 bytes"))
    head, body = data.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head
    assert json.loads(body)["error"] == {
        "code": "request_header_fields_too_large",
        "message": "request head is larger than 16384 bytes",
    }


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=50))
def test_arbitrary_bytes_only_ever_raise_parse_error(data, split):
    try:
        parse_all(data, split=split)
    except ParseError as exc:
        assert 400 <= exc.status < 600 and exc.message


_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda t: t not in ("host", "content-length", "transfer-encoding", "connection")
)


@settings(max_examples=150, deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.sampled_from(["GET", "POST", "DELETE"]),
            st.text(alphabet="abcxyz/", max_size=20),
            st.dictionaries(_token, st.text(alphabet="abc 123;=", max_size=20).map(str.strip), max_size=5),
            st.binary(max_size=300),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
    split=st.integers(min_value=1, max_value=64),
)
def test_valid_pipelined_requests_round_trip_in_any_split(requests, split):
    wire = b""
    for method, path, headers, body, chunked in requests:
        lines = [f"{method} /{path} HTTP/1.1", "Host: example"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if chunked:
            lines.append("Transfer-Encoding: chunked")
            framed = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7))
            framed += b"0\r\n\r\n"
        else:
            lines.append(f"Content-Length: {len(body)}")
            framed = body
        wire += ("\r\n".join(lines) + "\r\n\r\n").encode() + framed
    parsed, parser = parse_all(wire, split=split)
    assert parser.buffered == b""
    assert len(parsed) == len(requests)
    for (head, body), (method, path, headers, sent, _) in zip(parsed, requests, strict=True):
        assert (head.method, head.path, body) == (method, "/" + path, sent)
        for name, value in headers.items():
            assert head.headers.get(name) == value

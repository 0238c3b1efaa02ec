"""Sans-I/O stdio framing: NDJSON, Content-Length detection, oversize, garbage."""

from __future__ import annotations

import json

import pytest
from roost.plugins.mcp._framing import CONTENT_LENGTH, NDJSON, Frame, NotJson, Oversize, StdioFramer


def frames(events):
    return [e.message for e in events if isinstance(e, Frame)]


def test_ndjson_lines_split_across_chunks_and_crlf():
    framer = StdioFramer()
    assert framer.feed(b'{"a":') == []
    events = framer.feed(b'1}\r\n{"b":2}\n\n{"c"')
    assert frames(events) == [{"a": 1}, {"b": 2}]
    assert frames(framer.feed(b":3}\n")) == [{"c": 3}]
    assert framer.mode == NDJSON
    assert framer.encode(b'{"x":1}') == b'{"x":1}\n'


def test_non_json_lines_are_events_and_the_stream_goes_on():
    framer = StdioFramer()
    events = framer.feed(b'Starting server...\n{"ok":true}\n\xff\xfe\n')
    assert isinstance(events[0], NotJson) and "Starting server" in events[0].line
    assert events[1] == Frame({"ok": True}, 11)
    assert isinstance(events[2], NotJson) and "UTF-8" in events[2].error


def test_oversize_line_is_drained_and_reported_then_the_next_message_is_read():
    framer = StdioFramer(max_bytes=100)
    big = b'{"pad":"' + b"x" * 500 + b'"}'
    events = framer.feed(big[:150]) + framer.feed(big[150:] + b'\n{"next":1}\n')
    assert isinstance(events[0], Oversize) and events[0].size > 100 and events[0].limit == 100
    assert frames(events) == [{"next": 1}]
    assert not framer.pending


def test_oversize_line_in_one_chunk():
    framer = StdioFramer(max_bytes=10)
    events = framer.feed(b'{"pad":"xxxxxxxxxxxxxxxxxxx"}\n{"a":1}\n')
    assert isinstance(events[0], Oversize) and frames(events) == [{"a": 1}]


def test_content_length_peer_is_detected_and_answered_in_kind():
    framer = StdioFramer()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    message = b"Content-Length: %d\r\n\r\n" % len(body) + body
    assert framer.feed(message[:5]) == []  # "Conte" could still become the header
    events = framer.feed(message[5:] + message)
    assert framer.mode == CONTENT_LENGTH
    assert [m["method"] for m in frames(events)] == ["ping", "ping"]
    assert framer.encode(b"{}") == b"Content-Length: 2\r\n\r\n{}"


def test_content_length_oversize_body_is_skipped():
    framer = StdioFramer(max_bytes=8)
    events = framer.feed(b"Content-Length: 20\r\n\r\n" + b"x" * 20 + b"Content-Length: 2\r\n\r\n{}")
    assert isinstance(events[0], Oversize) and frames(events) == [{}]


def test_bad_content_length_header_is_reported():
    framer = StdioFramer(mode=CONTENT_LENGTH)
    events = framer.feed(b"Content-Length: lots\r\n\r\n")
    assert isinstance(events[0], NotJson) and "Content-Length" in events[0].error


def test_encode_refuses_oversize_and_raw_newlines():
    framer = StdioFramer(max_bytes=4, mode=NDJSON)
    with pytest.raises(ValueError, match="over the limit"):
        framer.encode(b"123456")
    with pytest.raises(ValueError, match="newline"):
        StdioFramer().encode(b"{\n}")


def test_bad_constructor_arguments_name_the_field():
    with pytest.raises(ValueError, match="mode"):
        StdioFramer(mode="xml")
    with pytest.raises(ValueError, match="max_bytes"):
        StdioFramer(max_bytes=0)


def test_many_lines_in_one_chunk_after_draining_an_oversize_one():
    framer = StdioFramer(max_bytes=10)
    assert frames(framer.feed(b'{"a":1}\n' + b"x" * 15)) == [{"a": 1}]  # the tail is over the limit
    assert framer.feed(b"y" * 5) == [] and framer.pending  # skipping the rest of the line
    events = framer.feed(b'z\n{"b":2}\r\n  \n{"c":3}\n{"d"')
    assert events[0] == Oversize(22, 10)  # 15 + 5 + "z" + its newline
    assert frames(events) == [{"b": 2}, {"c": 3}] and framer.pending
    assert frames(framer.feed(b":4}\n")) == [{"d": 4}]


def test_an_integer_past_pythons_digit_limit_is_not_json_and_the_lines_around_it_are_read():
    # Regression (review): json.loads raises a plain ValueError (not JSONDecodeError) for an
    # integer over 4300 digits; it escaped feed() and ended the connection.
    framer = StdioFramer(mode=NDJSON)
    huge = b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}'
    events = framer.feed(b'{"id":1}\n' + huge + b'\n{"id":2}\n')
    assert isinstance(events[0], Frame) and events[0].message == {"id": 1}
    assert isinstance(events[1], NotJson) and "invalid JSON" in events[1].error
    assert isinstance(events[2], Frame) and events[2].message == {"id": 2}
    assert framer.feed(b"") == []

"""The models: reading every dialect, writing every dialect, round trips, field-named errors."""

import base64

import pytest
from roost.plugins.a2a import _models as m
from roost.plugins.a2a import _protocol as p


def sample_task():
    parts = (
        m.Part(text="hi"),
        m.Part(raw=b"\x00\x01", media_type="application/octet-stream", filename="b.bin"),
        m.Part(url="https://x/y.png", media_type="image/png", filename="y.png"),
        m.Part(data={"a": [1, None]}, has_data=True),
    )
    msg = m.Message("m1", m.ROLE_USER, parts, context_id="c", task_id="t")
    art = m.Artifact("a1", parts, name="out")
    return m.Task(
        "t",
        "c",
        m.TaskStatus(
            m.INPUT_REQUIRED,
            m.agent_message("q?", context_id="c", task_id="t"),
            "2026-01-01T00:00:00.000Z",
        ),
        (art,),
        (msg,),
    )


@pytest.mark.parametrize("dialect", [m.V1, m.V03, m.V01])
def test_task_round_trips_through_every_dialect(dialect):
    task = sample_task()
    back = m.task_from_json(task.to_json(dialect))
    assert back.id == task.id and back.context_id == task.context_id
    assert back.status.state == task.status.state
    assert [pt.kind for pt in back.artifacts[0].parts] == ["text", "file", "file", "data"]
    assert (
        back.history[0].parts[1].raw == b"\x00\x01"
        and back.history[0].parts[2].url == "https://x/y.png"
    )
    assert back.history[0].parts[3].data == {"a": [1, None]}


def test_dialect_spellings():
    task = sample_task()
    v03 = task.to_json(m.V03)
    assert v03["kind"] == "task" and v03["status"]["state"] == "input-required"
    assert (
        v03["history"][0]["role"] == "user"
        and v03["history"][0]["parts"][1]["file"]["bytes"] == base64.b64encode(b"\x00\x01").decode()
    )
    v01 = task.to_json(m.V01)
    assert (
        v01["sessionId"] == "c"
        and "contextId" not in v01
        and v01["history"][0]["parts"][0] == {"type": "text", "text": "hi"}
    )
    v1 = task.to_json(m.V1)
    assert (
        v1["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        and v1["history"][0]["role"] == "ROLE_USER"
    )
    assert m.event_to_json(m.StatusUpdate("t", "c", task.status), m.V03)["final"] is True


@pytest.mark.parametrize(
    "header,query,expected",
    [
        (None, None, "0.3"),
        ("1.0", None, "1.0"),
        ("1.0.7", None, "1.0"),
        ("0.3", None, "0.3"),
        (None, "1.0", "1.0"),
        ("", "1.0", "1.0"),
    ],
)
def test_version_negotiation(header, query, expected):
    assert p.negotiate_version(header, query) == expected


def test_method_tables_per_version():
    assert p.resolve_method("SendMessage", "1.0") == ("send", "1.0")
    assert p.resolve_method("message/send", "0.3") == ("send", "0.3")
    assert p.resolve_method("tasks/send", "0.3") == ("send", "0.1")
    for method, version in (("SendMessage", "0.3"), ("message/send", "1.0"), ("tasks/send", "1.0")):
        with pytest.raises(m.A2AError) as err:
            p.resolve_method(method, version)
        assert err.value.code == -32009


def test_v03_blocking_false_means_return_immediately():
    params = p.parse_send(
        {
            "message": {"messageId": "x", "role": "user", "parts": [{"kind": "text", "text": "a"}]},
            "configuration": {"blocking": False},
        },
        m.V03,
    )
    assert params.options.return_immediately is True


def test_rest_error_shape():
    body = m.A2AError(m.TASK_NOT_FOUND, "gone").rest_error()
    assert body["error"]["code"] == 404 and body["error"]["status"] == "NOT_FOUND"


def test_the_public_a2a_error_still_names_its_reason():
    """``A2AError`` (and the client's ``A2AClientError``) is exported; its ``reason``, the
    ErrorInfo reason its answers carry, is how a caller tells one error from another."""
    from roost.plugins.a2a import A2AError

    gone = A2AError(m.TASK_NOT_FOUND, "gone")
    assert gone.reason == "TASK_NOT_FOUND" == gone.details()[0]["reason"]
    assert m.unavailable("disk full").reason == "UNAVAILABLE"

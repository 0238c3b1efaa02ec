"""``RedactingFormatter``: a credential given to ``redact_from_logs`` is in no line it writes."""

import io
import json
import logging
from urllib.parse import quote

import pytest
from roost.kernel import (
    REDACTED_FOR_LOG,
    RedactingFormatter,
    RedactingStreamHandler,
    redact_for_log,
    redact_from_logs,
)

KEY = 'sk-logs/"test\\key+1234'  # JSON escapes "/", '"' and "\"; a URL all three and "+"


@pytest.fixture
def log_file(tmp_path):
    """A logger writing through a ``RedactingFormatter`` to a file, as ``roost run`` does."""
    path = tmp_path / "roost.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("roost.test.logs")
    log.addHandler(handler)
    log.propagate = False
    try:
        yield log, path
    finally:
        log.removeHandler(handler)
        log.propagate = True
        handler.close()


def test_a_traceback_quoting_a_key_in_any_form_is_written_without_it(log_file):
    log, path = log_file
    redact_from_logs([KEY])
    try:
        try:
            raise ValueError(f"peer said {json.dumps({'auth': KEY})}")
        except ValueError as exc:
            raise RuntimeError(f"GET /v1?key={quote(KEY, safe='')} failed\nfor {KEY}") from exc
    except RuntimeError as exc:
        log.exception("provider failed: %r", exc)
    text = path.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "ValueError: peer said" in text
    for form in (KEY, json.dumps(KEY)[1:-1], quote(KEY, safe=""), "sk-logs"):
        assert form not in text, text
    assert '{"auth": "[redacted]"}' in text and "GET /v1?key=[redacted] failed" in text


def test_a_record_marked_redacted_still_has_its_traceback_redacted(log_file):
    # Regression: the mark (a message redact_for_log already read) made the formatter write
    # the whole line as it was, so a traceback logged with it kept the key.
    log, path = log_file
    redact_from_logs([KEY])
    try:
        raise RuntimeError(f"peer said {KEY}")
    except RuntimeError:
        log.warning("%s", redact_for_log(f"said {KEY}"), exc_info=True, extra=REDACTED_FOR_LOG)
    log.warning("%s", redact_for_log(f"plain {KEY}"), extra=REDACTED_FOR_LOG)
    text = path.read_text(encoding="utf-8")
    assert "RuntimeError: peer said [redacted]" in text
    assert KEY not in text and "sk-logs" not in text, text
    assert "WARNING roost.test.logs: plain [redacted]\n" in text


def test_a_secret_too_short_to_be_one_leaves_the_log_alone(log_file):
    # "abc" replaced everywhere would ruin every line; redact's rule holds: 4 characters or more.
    log, path = log_file
    redact_from_logs(["abc", "", "wxyz"])
    log.warning("abc and wxyz")
    assert path.read_text(encoding="utf-8") == "WARNING roost.test.logs: abc and [redacted]\n"


def test_a_log_call_that_fails_is_reported_without_the_key_it_was_given(capsys):
    # logging's own report of a record it could not write ("--- Logging error ---") goes to
    # stderr with the message's arguments and a traceback, past every formatter.
    stream = io.StringIO()
    handler = RedactingStreamHandler(stream, "%(message)s")
    log = logging.getLogger("roost.test.logs.failed")
    log.addHandler(handler)
    log.propagate = False
    redact_from_logs([KEY])
    try:
        log.warning("%d calls with %s", KEY, "x")  # %d of a string: the call fails
        log.warning("then %s", KEY)
    finally:
        log.removeHandler(handler)
    report = capsys.readouterr().err
    assert "--- Logging error ---" in report and "Arguments: ('[redacted]', 'x')" in report
    assert KEY not in report and json.dumps(KEY)[1:-1] not in report, report
    assert stream.getvalue() == "then [redacted]\n"

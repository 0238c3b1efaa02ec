"""``roost run``'s log: every credential the daemon reads stays out of it, whoever quotes it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from waiting import wait_until_sync

ROOST = Path(sys.executable).with_name("roost")

PROVIDER_KEY = "sk-prov/ider+key=1234"  # "\/" in JSON, percent-encoded in a URL
API_KEY = 'roost"api\\key-5678'  # ROOST_API_KEY: JSON escapes its quote and backslash
A2A_TOKEN = "a2a-peer-token-90ab"  # an external A2A agent's Authorization header
PEM = "-----BEGIN KEY-----\nQUJDREVGR0hJSktMTU5P\nUFFSU1RVVldYWVph\n-----END KEY-----"

# A peer that knows every credential (its script has them, as a hostile or buggy peer may)
# and quotes them: raw, JSON-escaped, percent-encoded and line by line on its stderr, and in
# the error it answers roost's initialize with (which the daemon logs as why it is down).
ECHO = f"""
import json, sys
keys = {[PROVIDER_KEY, API_KEY, A2A_TOKEN]!r}
pem = {PEM!r}
err = sys.stderr
for key in keys:
    err.write("raw: " + key + "\\n")
    err.write("json: " + json.dumps({{"said": key}}) + "\\n")
import urllib.parse
for key in keys:
    err.write("url: /cb?k=" + urllib.parse.quote(key, safe="") + "\\n")
err.write("pem:\\n" + pem + "\\n")
err.write("echo-done\\n")
err.flush()
request = json.loads(sys.stdin.readline())
message = "bad key " + " ".join(keys) + " in\\n" + pem
answer = {{"jsonrpc": "2.0", "id": request["id"], "error": {{"code": -32000, "message": message}}}}
sys.stdout.write(json.dumps(answer) + "\\n")
sys.stdout.flush()
sys.stdin.read()
"""


def write_project(tmp_path: Path) -> Path:
    agent = tmp_path / "agents" / "remote" / "agent.json"
    agent.parent.mkdir(parents=True)
    model = {"provider": "openai", "name": "gpt-test"}  # built at boot: its key is read then
    agent.write_text(json.dumps({"name": "remote", "description": "d", "model": model}))
    echo = tmp_path / "echo.py"
    echo.write_text(ECHO)
    quiet = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    config = tmp_path / "roost.toml"
    config.write_text(
        f"home = {json.dumps(str(tmp_path / 'home'))}\n"
        f"[agents]\ndirs = [{json.dumps(str(agent.parent.parent))}]\nbundled = false\n"
        '[providers.openai]\napi_key_env = "ROOST_TEST_PROVIDER_KEY"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
        '[[a2a.external_agents]]\nname = "peer"\nurl = "http://127.0.0.1:9"\n'
        f'headers = {{ Authorization = "Bearer {A2A_TOKEN}" }}\n'
        '[[mcp_servers]]\nname = "echo"\n[mcp_servers.transport]\ntype = "stdio"\n'
        f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(echo))}]\n"
        '[[mcp_servers]]\nname = "pem"\nenv = ["ROOST_TEST_PEM_TOKEN"]\n'
        f'[mcp_servers.transport]\ntype = "stdio"\ncommand = {json.dumps(quiet[0])}\n'
        f"args = {json.dumps(quiet[1:])}\n"
    )
    return config


def daemon_log(tmp_path: Path, config: Path, env: dict[str, str], *done: str) -> str:
    """The log (stderr) of ``roost run`` with ``config`` and ``env`` (over this process's,
    without its ``ROOST_*``), read once it holds each of ``done``, the daemon stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")} | env
    log_path = tmp_path / "daemon.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [str(ROOST), "--config", str(config), "run", "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env=env,
        )
        try:

            def logged() -> bool:
                assert proc.poll() is None, log_path.read_text()
                text = log_path.read_text()
                return all(said in text for said in done)

            wait_until_sync(logged, f"the daemon's log to hold {done!r}", timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    return log_path.read_text()


def test_a_peer_quoting_the_daemons_credentials_in_any_form_leaves_none_in_its_log(tmp_path):
    config = write_project(tmp_path)
    env = {
        "ROOST_HOME": str(tmp_path / "home"),
        "ROOST_API_KEY": API_KEY,
        "ROOST_TEST_PROVIDER_KEY": PROVIDER_KEY,
        "ROOST_TEST_PEM_TOKEN": PEM,
    }
    logged = daemon_log(tmp_path, config, env, "echo-done", "MCP server echo is down")
    for secret in (PROVIDER_KEY, API_KEY, A2A_TOKEN):
        for form in (
            secret,
            json.dumps(secret)[1:-1],
            secret.replace("/", "\\/"),
            quote(secret, safe=""),
        ):
            assert form not in logged, (form, logged)
    for line in PEM.splitlines()[1:3]:
        assert line not in logged, logged
    # What was said around them is still there: the log lost the keys, not the lines.
    assert "raw: [redacted]\n" in logged and 'json: {"said": "[redacted]"}' in logged
    assert "url: /cb?k=[redacted]" in logged and "bad key [redacted] [redacted]" in logged


A2A_API_KEY = "a2a-card-key-3456cdef"  # [a2a] api_key: the bearer of the extended card

QUOTE_A2A_KEY = f"""
import sys
sys.stderr.write("a2a key: {A2A_API_KEY}\\n")
sys.stderr.write("quoted-done\\n")
sys.stderr.flush()
sys.stdin.read()
"""


def test_a_peer_quoting_the_a2a_api_key_leaves_it_out_of_the_log(tmp_path):
    # Regression: [a2a] api_key, a credential the daemon reads and callers send as their
    # bearer, was not handed to redact_from_logs: a peer's line quoting it was logged whole.
    quote_script = tmp_path / "quote.py"
    quote_script.write_text(QUOTE_A2A_KEY)
    config = tmp_path / "roost.toml"
    config.write_text(
        f"home = {json.dumps(str(tmp_path / 'home'))}\n[agents]\nbundled = false\n"
        f'[a2a]\napi_key = "{A2A_API_KEY}"\n'
        '[[mcp_servers]]\nname = "quote"\n[mcp_servers.transport]\ntype = "stdio"\n'
        f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(quote_script))}]\n"
    )
    logged = daemon_log(tmp_path, config, {"ROOST_HOME": str(tmp_path / "home")}, "quoted-done")
    assert A2A_API_KEY not in logged and "a2a key: [redacted]" in logged, logged


CLIENT_KEY = "roost-client-key-7890abcd"  # ROOST_API_KEY of a `roost` command

# What answers at the daemon's address (a proxy in front of it, say) and echoes the request's
# Authorization header in a body that is not the daemon's JSON: the CLI quotes the body.
ECHO_AUTH = """
import http.server, json, sys

class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        healthy = self.path == "/health"
        body = b'{"status": "ok"}' if healthy else self.headers["Authorization"].encode()
        self.send_response(200 if healthy else 502)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Echo)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_an_error_quoting_the_commands_key_is_printed_without_it(tmp_path):
    # Regression: the last `roost: error:` line and the traceback `--debug` prints were
    # written outside the log's formatter: a daemon's answer quoting the key showed it.
    script = tmp_path / "echo_auth.py"
    script.write_text(ECHO_AUTH)
    echo = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(echo.stdout.readline())
        home = tmp_path / "home"
        home.mkdir()
        daemon = {"pid": echo.pid, "host": "127.0.0.1", "port": port, "started": 1.0}
        (home / "daemon.json").write_text(json.dumps(daemon))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
        env |= {"ROOST_HOME": str(home), "ROOST_API_KEY": CLIENT_KEY}
        for debug in ([], ["--debug"]):
            result = subprocess.run(
                [str(ROOST), "agents", *debug], capture_output=True, text=True, env=env, timeout=60
            )
            assert result.returncode == 1, result.stderr
            assert CLIENT_KEY not in result.stderr, result.stderr
            said = "HTTP 502: Bearer [redacted]"
            assert (f"roost: error: {said}\n" if not debug else said) in result.stderr
        assert "Traceback (most recent call last)" in result.stderr  # --debug's, redacted
    finally:
        echo.kill()
        echo.wait(timeout=30)


LOGGED_KEY = "logged-key-5678efgh"

# The daemon's logging as `roost run` sets it up, then what reaches its stderr outside a
# formatted line: a warning quoting the key, and a log call that fails (logging's own
# "--- Logging error ---" report prints the message's arguments and a traceback).
OUTSIDE_THE_FORMATTER = f"""
import logging, warnings
from roost.kernel import redact_from_logs
from roost.plugins.cli._main import _setup_logging

_setup_logging(False, "run")
redact_from_logs([{LOGGED_KEY!r}])
warnings.warn("retrying with key {LOGGED_KEY}")
logging.getLogger("roost.test").warning("%d requests with %s", {LOGGED_KEY!r}, "x")
"""


def test_a_warning_and_a_failed_log_call_quoting_a_key_reach_stderr_without_it():
    result = subprocess.run(
        [sys.executable, "-c", OUTSIDE_THE_FORMATTER], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert LOGGED_KEY not in result.stderr, result.stderr
    assert "UserWarning: retrying with key [redacted]" in result.stderr
    assert "--- Logging error ---" in result.stderr and "'[redacted]'" in result.stderr


# An exception Python can only report ("Exception ignored in": a __del__ or a generator's
# finally raising) and one that ends a thread, each quoting the key.
UNRAISABLE_AND_THREAD = f"""
import gc, threading
from roost.kernel import redact_from_logs
from roost.plugins.cli._main import _setup_logging

_setup_logging(False, "run")
redact_from_logs([{LOGGED_KEY!r}])

class Holder:
    def __del__(self):
        raise RuntimeError("closing the session of {LOGGED_KEY}")

Holder()
gc.collect()

def worker():
    raise ValueError("worker had {LOGGED_KEY}")

thread = threading.Thread(target=worker, name="quoting")
thread.start()
thread.join()
print("done")
"""


def test_an_ignored_exception_and_a_threads_failure_quoting_a_key_reach_stderr_without_it():
    # Regression: Python printed both straight to stderr, past the log's redaction.
    result = subprocess.run(
        [sys.executable, "-c", UNRAISABLE_AND_THREAD], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout == "done\n", result.stderr
    assert LOGGED_KEY not in result.stderr, result.stderr
    assert "RuntimeError: closing the session of [redacted]" in result.stderr
    assert "ValueError: worker had [redacted]" in result.stderr
    assert "quoting" in result.stderr  # which thread


# A server whose stderr line quotes the provider's key (not one of its own credentials) where
# roost cuts the line (4,000 characters).
QUOTE_ACROSS_THE_CUT = f"""
import sys
sys.stderr.write("x" * 3990 + {PROVIDER_KEY!r} + "\\n" + "cut-done\\n")
sys.stderr.flush()
sys.stdin.read()
"""


def test_a_peer_quoting_the_provider_key_across_the_cut_of_its_line_logs_no_head_of_it(tmp_path):
    # Regression: a stdio server's stderr line was redacted with its own credentials only,
    # then cut, then the log's formatter looked for every credential: a key the cut went
    # through kept its head (the formatter could not know it), and each line was read twice.
    config = write_project(tmp_path)
    script = tmp_path / "cut.py"
    script.write_text(QUOTE_ACROSS_THE_CUT)
    config.write_text(
        config.read_text()
        + '[[mcp_servers]]\nname = "cut"\n[mcp_servers.transport]\ntype = "stdio"\n'
        + f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(script))}]\n"
    )
    env = {"ROOST_HOME": str(tmp_path / "home"), "ROOST_TEST_PROVIDER_KEY": PROVIDER_KEY}
    logged = daemon_log(tmp_path, config, env, "cut-done")
    assert PROVIDER_KEY[:8] not in logged, logged[-300:]
    assert "x" * 3990 + "[redacted]" in logged

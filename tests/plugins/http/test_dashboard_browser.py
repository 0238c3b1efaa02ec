"""The dashboard in a real browser: headless Debian Chromium, driven through its
chromedriver by selenium, against a real daemon (``roost run`` on 127.0.0.1, its own data
directory). The page sends the demo's messages to the bundled coordinator and draws each
request's tree live; a screenshot is saved in ``.artifacts/``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOST = Path(sys.executable).parent / "roost"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[3] / ".artifacts"
# The two requests of roost demo (cli._commands.run_demo): a collaboration, then a runaway chain.
COLLABORATION = "Write a haiku about Trio nurseries"
RUNAWAY = "runaway: keep passing this along forever"
MARKUP = (
    '<b id="bold">bold</b><img src="x" onerror="window.pwned = 1"><script>window.pwned = 2</script>'
)

selenium = pytest.importorskip(
    "selenium", reason="needs selenium (the test extra: pip install -e .[test])"
)
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip(
        "needs Debian's chromium and chromium-driver packages (as root: apt-get install chromium "
        "chromium-driver; `make test` does it)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# The tree of one trace as the page shows it: each row's depth, kind, name, duration, state.
ROWS = """
const rows = [];
const walk = (list, depth) => {
  for (const li of list.children) {
    const row = li.querySelector(":scope > .row");
    rows.push({
      depth,
      kind: row.querySelector(".kind").textContent,
      name: row.querySelector(".name").textContent,
      dur: row.querySelector(".dur").textContent, status: li.classList.contains("error") ? "error"
        : li.classList.contains("running") ? "running" : "ok",
      marks: [...row.querySelectorAll(".mark")].map((m) => m.textContent),
      color: getComputedStyle(row.querySelector(".name")).color,
      markColor: row.querySelector(".mark")
        ? getComputedStyle(row.querySelector(".mark")).backgroundColor : null,
    });
    const sub = li.querySelector(":scope > ul");
    if (sub) walk(sub, depth + 1);
  }
};
const tree = document.querySelector(`article[data-trace="${arguments[0]}"] ul.tree`);
if (tree) walk(tree, 0);
return rows;
"""


@contextmanager
def running_daemon(tmp_path, **env_extra):
    """``roost run`` on 127.0.0.1, a free port, its own data directory; its base URL."""
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (run make install)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env["ROOST_HOME"] = str(home)
    env.update(env_extra)
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen(
        [str(ROOST), "run", "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (home / "daemon.json").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the daemon did not start: {(tmp_path / 'daemon.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        info = json.loads((home / "daemon.json").read_text())
        yield f"http://127.0.0.1:{info['port']}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


@pytest.fixture
def daemon(tmp_path):
    with running_daemon(tmp_path) as url:
        yield url


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1250",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def send(driver, text: str) -> str:
    """Send ``text`` to the selected agent from the page; the id of the trace it drew."""
    box = driver.find_element(By.ID, "send-text")
    box.clear()
    box.send_keys(text)
    before = {
        a.get_attribute("data-trace")
        for a in driver.find_elements(By.CSS_SELECTOR, "article.trace")
    }
    driver.find_element(By.ID, "send-button").click()
    wait = WebDriverWait(driver, 30)
    wait.until(lambda d: "streaming" not in d.find_element(By.ID, "reply").get_attribute("class"))
    (trace,) = {
        a.get_attribute("data-trace")
        for a in driver.find_elements(By.CSS_SELECTOR, "article.trace")
    } - before
    return trace


def settled_rows(driver, trace: str, expect: int) -> list[dict]:
    """The trace's rows once it has at least ``expect`` of them and none is running."""
    rows: list[dict] = []

    def done(d):
        nonlocal rows
        rows = d.execute_script(ROWS, trace)
        return len(rows) >= expect and all(r["status"] != "running" for r in rows)

    WebDriverWait(driver, 30).until(done)
    return rows


def is_red(css_color: str) -> bool:
    r, g, b = (int(v) for v in re.findall(r"\d+", css_color)[:3])
    return r > 150 and g < 90 and b < 90


def test_the_dashboard_draws_the_demo_live_and_shows_markup_as_text(daemon, browser):
    browser.get(daemon + "/")
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "live").text == "live")
    WebDriverWait(browser, 10).until(
        lambda d: "coordinator" in d.find_element(By.ID, "agents").text
    )
    agents = browser.find_element(By.ID, "agents").text
    assert (
        all(name in agents for name in ("coordinator", "worker", "reviewer"))
        and "scripted" in agents
    )
    assert browser.find_element(By.ID, "send-agent").get_attribute("value") == "coordinator"

    # 1. the collaboration: coordinator → worker → reviewer, nested, each with its duration
    trace = send(browser, COLLABORATION)
    assert "Reviewer: approved" in browser.find_element(By.ID, "reply").text
    rows = settled_rows(browser, trace, 5)
    chain = [(r["depth"], r["kind"], r["name"]) for r in rows if r["kind"] in ("agent", "tool")]
    assert chain[:3] == [
        (0, "agent", "coordinator"),
        (1, "tool", "agent_worker"),
        (2, "agent", "worker"),
    ]
    assert (3, "tool", "agent_reviewer") in chain and (4, "agent", "reviewer") in chain
    assert chain.index((4, "agent", "reviewer")) == chain.index((3, "tool", "agent_reviewer")) + 1
    assert all(re.fullmatch(r"\d+(\.\d+)? m?s", r["dur"]) for r in rows), rows
    assert all(r["status"] == "ok" for r in rows) and not [r for r in rows if r["kind"] == "model"]
    browser.find_element(By.ID, "show-models").click()  # each model call under its run
    rows = browser.execute_script(ROWS, trace)
    models = [i for i, r in enumerate(rows) if r["kind"] == "model"]
    assert models and all(rows[i]["depth"] > 0 for i in models)
    assert {rows[i]["name"] for i in models} == {"scripted rules"}
    browser.find_element(By.ID, "show-models").click()

    # 2. the runaway chain: the sixth hop is refused, its call marked with the breaker in red
    trace = send(browser, RUNAWAY)
    rows = settled_rows(browser, trace, 10)
    (refused,) = [r for r in rows if r["status"] == "error"]
    assert (refused["kind"], refused["name"], refused["depth"]) == ("tool", "agent_reviewer", 9)
    assert refused["marks"] == ["breaker: depth 6 > 5"]
    assert is_red(refused["color"]) and is_red(refused["markColor"])
    agents_in_chain = [r["name"] for r in rows if r["kind"] == "agent"]
    assert agents_in_chain == ["coordinator", "worker", "reviewer", "coordinator", "worker"]
    head = browser.find_element(By.CSS_SELECTOR, f'article[data-trace="{trace}"] .trace-head').text
    assert "breaker" in head and "1 error" in head
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))

    # 3. markup in a reply (and in what was sent) is shown as text, never run or rendered
    send(browser, MARKUP)
    reply = browser.find_element(By.ID, "reply")
    assert MARKUP in reply.text
    assert (
        browser.find_elements(By.ID, "bold") == []
        and browser.find_elements(By.CSS_SELECTOR, "main img") == []
    )
    assert browser.execute_script("return window.pwned === undefined")
    assert MARKUP[:20] in browser.find_element(By.CSS_SELECTOR, "article.trace .trace-head").text
    browser.save_screenshot(str(ARTIFACTS / "dashboard-markup.png"))
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe  # no script error, no policy violation


def test_a_keyed_daemon_asks_for_the_key_once_and_keeps_it_for_the_tab(tmp_path, browser):
    key = "dashboard-browser-test-key"
    with running_daemon(tmp_path, ROOST_API_KEY=key) as url:
        browser.get(url + "/")
        WebDriverWait(browser, 20).until(
            lambda d: d.find_element(By.ID, "key-panel").is_displayed()
        )
        assert browser.find_element(By.ID, "live").text == "offline"
        browser.find_element(By.ID, "key-input").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
        WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "live").text == "live")
        assert "coordinator" in browser.find_element(By.ID, "agents").text
        assert not browser.find_element(By.ID, "key-panel").is_displayed()
        browser.refresh()  # kept for the tab: no second prompt
        WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "live").text == "live")
        assert not browser.find_element(By.ID, "key-panel").is_displayed()
        trace = send(browser, "Write a haiku")
        rows = settled_rows(browser, trace, 5)
        assert [r["name"] for r in rows][:3] == ["coordinator", "agent_worker", "worker"]
        assert key not in browser.current_url
        assert browser.execute_script("return sessionStorage.getItem('roost.key')") == key
        log = (tmp_path / "daemon.log").read_text()
    assert key not in log


CALLER = {
    "name": "caller",
    "description": "asks the worker of another daemon, over MCP and over A2A",
    "model": {
        "provider": "scripted",
        "name": "rules",
        "script": {
            "rules": [
                {
                    "match": ".",
                    "steps": [
                        {"tool": "mcp_b_message", "arguments": {"message": "{message}"}},
                        {"tool": "a2a_bw", "arguments": {"message": "{message}"}},
                    ],
                    "reply": "{result[0]} / {result[1]}",
                }
            ]
        },
    },
    "capabilities": {"tools": ["mcp_b_*", "a2a_bw"]},
}


def test_a_tree_that_crossed_into_another_daemon_links_to_its_part_there(tmp_path, browser):
    with running_daemon(tmp_path / "b") as b_url:
        a = tmp_path / "a"
        (a / "agents" / "caller").mkdir(parents=True)
        (a / "agents" / "caller" / "agent.json").write_text(json.dumps(CALLER))
        (a / "roost.toml").write_text(
            f'[agents]\ndirs = ["{a / "agents"}"]\nbundled = false\n'
            f'[[mcp_servers]]\nname = "b"\nallow_local = true\n'
            f'[mcp_servers.transport]\ntype = "http"\nurl = "{b_url}/agents/worker/mcp"\n'
            f'[[a2a.external_agents]]\nname = "bw"\nurl = "{b_url}/a2a/agents/worker"\n'
        )
        with running_daemon(a, ROOST_CONFIG=str(a / "roost.toml")) as a_url:
            browser.get(a_url + "/")
            # both peers reachable: the links are only offered for a peer that is
            wait = WebDriverWait(browser, 30)
            wait.until(lambda d: d.find_element(By.ID, "mcp").text.count("connected") == 1)
            wait.until(lambda d: "connected" in d.find_element(By.ID, "a2a-peers").text)
            trace = send(browser, "Write a haiku about daemons")
            rows = settled_rows(browser, trace, 3)
            assert [(r["depth"], r["name"]) for r in rows] == [
                (0, "caller"),
                (1, "mcp_b_message"),
                (1, "a2a_bw"),
            ]
            links = browser.find_elements(By.CSS_SELECTOR, f'article[data-trace="{trace}"] .peer a')
            hrefs = {link.get_attribute("href") for link in links}
            assert hrefs == {f"{b_url}/#trace={trace}"} and len(links) == 2
            browser.get(links[0].get_attribute("href"))
            # daemon B shows its part of the same trace: the MCP and A2A server spans, each
            # with the worker's run (and its reviewer) under it
            focused = WebDriverWait(browser, 20).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, f'article.focus[data-trace="{trace}"]')
            )
            assert focused
            rows = settled_rows(browser, trace, 8)
            top = [(r["kind"], r["name"]) for r in rows if r["depth"] == 0]
            assert top == [
                ("mcp.server", "MCP server ← message"),
                ("a2a.server", "A2A server ← worker"),
            ]
            assert [r["name"] for r in rows if r["depth"] == 1] == ["worker", "worker"]
            assert any(r["name"] == "reviewer" for r in rows)
            browser.save_screenshot(str(ARTIFACTS / "dashboard-peer.png"))


def test_an_open_page_keeps_the_streamed_text_of_a_bounded_number_of_runs(daemon, browser):
    # The page kept every run's streamed text (up to 4,000 characters) for as long as it
    # was open, keyed by the run's span: a dashboard left open on a busy daemon grew
    # without bound. Only running runs show their text; the newest runs' is enough.
    import httpx

    browser.get(daemon + "/")
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "live").text == "live")
    runs = 300
    with httpx.Client(base_url=daemon, timeout=30) as http:
        for i in range(runs):
            trace_id = f"{i + 1:032x}"
            answer = http.post(
                "/api/agents/reviewer/message",
                json={"message": f"review number {i}"},
                headers={"traceparent": f"00-{trace_id}-{'1' * 16}-01"},
            )
            assert answer.status_code == 200, answer.text

    def last_run_ended(d):
        return d.execute_script(
            "const t = state.traces.get(arguments[0]);"
            "return !!t && [...t.spans.values()].some("
            "  (s) => s.kind === 'agent' && s.status !== 'running');",
            trace_id,
        )

    WebDriverWait(browser, 30).until(last_run_ended)
    kept = browser.execute_script("return state.tokens.size")
    assert 0 < kept <= 100, f"streamed text of {kept} runs kept after {runs}"


def test_a_wrong_or_refused_key_still_asks_for_the_key(tmp_path, browser):
    # 2d17f93 asks on a 401 only when the request went with the key the tab still holds (a
    # stale answer to a request sent before the key was given must not reopen the panel).
    # A wrong key typed, and a key the daemon no longer takes, must still ask.
    key = "dashboard-browser-test-key"
    panel_shown = lambda d: d.find_element(By.ID, "key-panel").is_displayed()  # noqa: E731
    with running_daemon(tmp_path, ROOST_API_KEY=key) as url:
        browser.get(url + "/")
        WebDriverWait(browser, 20).until(panel_shown)
        browser.find_element(By.ID, "key-input").send_keys("a-wrong-key")
        browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
        assert browser.execute_script("return sessionStorage.getItem('roost.key')") == "a-wrong-key"
        WebDriverWait(browser, 20).until(panel_shown)  # hidden on submit, asked again
        assert browser.find_element(By.ID, "live").text == "offline"

        browser.find_element(By.ID, "key-input").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
        WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "live").text == "live")
        assert not panel_shown(browser)

        # the stale case 2d17f93 fixed: refused as sent without a key, answered after it
        stale = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "sessionStorage.removeItem('roost.key');"
            "const sent = api('/api/agents');"
            "sessionStorage.setItem('roost.key', arguments[0]);"
            "sent.then(() => done('served'), (e) => done(e.message));",
            key,
        )
        assert stale == "unauthorized" and not panel_shown(browser)

        # the key the tab holds is refused now (as after the daemon's key changed)
        browser.execute_script(
            "sessionStorage.setItem('roost.key', 'a-revoked-key'); loadAgents().catch(() => {});"
        )
        WebDriverWait(browser, 20).until(panel_shown)

// roost's dashboard: the REST API for the state, /api/events for live changes.
// Every value is shown as text (textContent, never HTML): agent output is untrusted.
"use strict";

const KEY = "roost.key"; // the API key, kept for this tab only (sessionStorage)
const KINDS = "TRACE:,AGENT:TOKEN,AGENT:REPLY,KERNEL:,ACTOR:,MCP:SERVER";
const MAX_TRACES = 30;
const MAX_TOKENS = 4000; // characters of streamed text kept per run
const MAX_RUNS = 100; // runs whose streamed text is kept (the newest; a page may stay open)

const state = {
  traces: new Map(), // trace id -> {id, spans: Map(span id -> record), el, sent}
  tokens: new Map(), // run span id -> its streamed text so far (the newest MAX_RUNS runs)
  peers: new Map(), // "mcp:<name>" / "a2a:<name>" -> connected?
  sent: null, // the trace id of the message sent from this page
  socket: null,
  retry: 1000, // ms until the next attempt to reconnect
  timer: null,
};

// ---- small helpers ---------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

/** An element with a class and children; strings become text nodes. */
function h(tag, cls, ...children) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

function randomHex(bytes) {
  const data = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(data, (b) => b.toString(16).padStart(2, "0")).join("");
}

function ms(value) {
  if (value === null || value === undefined) return "";
  if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
  return `${value.toFixed(value < 10 ? 2 : 1)} ms`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString();
}

function httpUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url : null;
  } catch {
    return null;
  }
}

const pending = new Map();
/** Run ``fn`` once, a little later, however often this is asked meanwhile. */
function later(name, fn, delay = 300) {
  if (pending.has(name)) return;
  pending.set(name, setTimeout(() => { pending.delete(name); fn().catch(report); }, delay));
}

function report(error) {
  if (error && error.message !== "unauthorized") notice(String(error.message || error));
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

// ---- the API and its key -----------------------------------------------------------------

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers);
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
  if (response.status === 401) {
    // A request sent before the key was given may be refused after it: ask only if the
    // key it went with is still the one we hold.
    if (sessionStorage.getItem(KEY) === key) askForKey();
    throw new Error("unauthorized");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const said = body && body.error && body.error.message;
    const error = new Error(said || `${path}: HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function askForKey() {
  $("key-panel").hidden = false;
  $("key-button").hidden = false;
  $("key-input").focus();
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("key-input").value.trim());
  $("key-input").value = "";
  $("key-panel").hidden = true;
  notice("");
  start();
});
$("key-button").addEventListener("click", askForKey);

// ---- the live event stream ------------------------------------------------------------------

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  const text64 = btoa(String.fromCharCode(...bytes));
  return text64.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function connect() {
  clearTimeout(state.timer);
  if (state.socket) state.socket.close();
  const key = sessionStorage.getItem(KEY);
  // The key rides as a subprotocol (a page cannot set headers on a websocket, and a URL
  // may be logged); the daemon answers with "roost" and never echoes it.
  const protocols = key ? ["roost", `roost.bearer.${base64url(key)}`] : ["roost"];
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/api/events?kinds=${KINDS}`, protocols);
  state.socket = socket;
  socket.onopen = () => { state.retry = 1000; live(true); };
  socket.onmessage = (message) => onEvent(JSON.parse(message.data));
  socket.onclose = () => {
    if (state.socket !== socket) return;
    live(false);
    api("/api/traces?limit=1").catch((error) => {
      if (error.status === 403) notice("live updates need an admin key");
    });
    state.timer = setTimeout(connect, state.retry);
    state.retry = Math.min(state.retry * 2, 30000);
  };
}

function live(on) {
  $("live").textContent = on ? "live" : "offline";
  $("live").className = on ? "badge ok" : "badge off";
}

function onEvent(event) {
  const kind = event.kind || "";
  if (kind === "TRACE:SPAN_START" || kind === "TRACE:SPAN_END") {
    addSpan(event.payload);
    if (kind === "TRACE:SPAN_END" && event.payload.kind === "a2a.server") later("a2a", loadA2A);
  } else if (kind === "AGENT:TOKEN") {
    addToken(event);
  } else if (kind.startsWith("MCP:")) {
    later("mcp", loadMcp);
  } else {
    later("agents", loadAgents); // replies (token usage), restarts, tools that came or went
  }
}

// ---- agents, MCP servers, A2A ----------------------------------------------------------------

function badge(status) {
  const good = ["ready", "connected", "completed", "TASK_STATE_COMPLETED"].includes(status);
  const bad = /fail|stopped|unavailable|rejected|canceled/i.test(status || "");
  return h("span", `badge ${good ? "ok" : bad ? "bad" : "wait"}`, status || "?");
}

function list(label, items) {
  if (!items || !items.length) return null;
  return h("details", "list",
    h("summary", null, `${label} (${items.length})`),
    h("div", "names", items.join(", ")));
}

async function loadAgents() {
  const { agents } = await api("/api/agents");
  const select = $("send-agent");
  const chosen = select.value || "coordinator";
  select.replaceChildren(...agents.map((a) => h("option", null, a.name)));
  select.value = agents.some((a) => a.name === chosen) ? chosen : (agents[0] || {}).name || "";
  $("agents").replaceChildren(...agents.map((a) => {
    const usage = a.usage || {};
    return h("div", "card",
      h("div", "title", h("b", null, a.name), badge(a.status),
        a.a2a_enabled ? h("span", "tag", "A2A") : null),
      h("div", "dim", `${a.provider}${a.model ? " · " + a.model : ""}`),
      a.error ? h("div", "error-text", a.error) : null,
      h("div", "small", `tokens in ${usage.input_tokens || 0} · out ${usage.output_tokens || 0}`
        + ` · ${plural(usage.requests || 0, "request")}`),
      list("tools", a.tools),
      list("exposed over MCP", a.expose_tools),
      list("private", a.private_tools));
  }));
}

async function loadMcp() {
  const body = await api("/api/mcp/servers");
  const tools = new Map((body.connected || []).map((s) => [s.name, s.tools || []]));
  const servers = body.configured || [];
  for (const s of servers) state.peers.set(`mcp:${s.name}`, s.status === "connected");
  $("mcp").replaceChildren(...(servers.length ? servers.map((s) => h("div", "card",
    h("div", "title", h("b", null, s.name), badge(s.status), h("span", "tag", s.transport)),
    s.url ? h("div", "dim small", s.url) : null,
    h("div", "small", `restarts ${s.restarts || 0}`),
    s.error ? h("div", "error-text", s.error) : null,
    list("tools", tools.get(s.name)))) : [h("p", "dim", "none configured")]));
  renderAll();
}

async function loadA2A() {
  const peers = (await api("/api/a2a/external_agents")).external_agents || [];
  for (const p of peers) state.peers.set(`a2a:${p.name}`, p.status === "connected");
  $("a2a-peers").replaceChildren(...peers.map((p) => h("div", "card",
    h("div", "title", h("b", null, p.name), badge(p.status), h("span", "tag", "external")),
    h("div", "dim small", p.url),
    p.error ? h("div", "error-text", p.error) : null)));
  const listed = await api("/a2a/rest/tasks?historyLength=20&includeArtifacts=true&pageSize=20",
    { headers: { "A2A-Version": "1.0" } });
  const tasks = listed.tasks || [];
  const cards = tasks.length ? tasks.map(taskCard) : [h("p", "dim", "no tasks")];
  $("a2a-tasks").replaceChildren(...cards);
  renderAll();
}

function taskCard(task) {
  const status = task.status || {};
  const artifacts = (task.artifacts || []).map((a) => a.name || a.artifactId);
  const history = task.history || [];
  const last = history.length ? history[history.length - 1] : null;
  const text = last ? (last.parts || []).map((p) => p.text || "").join(" ").trim() : "";
  return h("div", "card",
    h("div", "title", h("b", "mono", task.id.slice(0, 8)),
      badge(String(status.state || "").replace("TASK_STATE_", "").toLowerCase())),
    h("div", "dim small",
      `context ${(task.contextId || "").slice(0, 8)} · ${plural(history.length, "message")}`),
    text ? h("div", "small clip", text) : null,
    list("artifacts", artifacts));
}

// ---- traces ----------------------------------------------------------------------------------

function traceOf(id) {
  let trace = state.traces.get(id);
  if (!trace) {
    trace = { id, spans: new Map(), el: h("article", "trace"), sent: null };
    trace.el.dataset.trace = id;
    state.traces.set(id, trace);
    $("traces").prepend(trace.el);
    const empty = $("no-traces");
    if (empty) empty.remove();
    while (state.traces.size > MAX_TRACES) {
      const [oldest, old] = state.traces.entries().next().value;
      old.el.remove();
      state.traces.delete(oldest);
    }
  }
  return trace;
}

function addSpan(span) {
  const trace = traceOf(span.trace_id);
  const known = trace.spans.get(span.span_id);
  // A span's end is final: a start seen after it (history and stream overlap) is old news.
  if (known && known.status !== "running" && span.status === "running") return;
  trace.spans.set(span.span_id, span);
  later(`trace:${trace.id}`, async () => render(trace), 50);
}

function addToken(event) {
  const trace = event.trace || {};
  const text = (event.payload && event.payload.text) || "";
  const sofar = (state.tokens.get(trace.span_id) || "") + text;
  state.tokens.delete(trace.span_id); // re-added as the newest
  state.tokens.set(trace.span_id, sofar.slice(-MAX_TOKENS));
  if (state.tokens.size > MAX_RUNS) state.tokens.delete(state.tokens.keys().next().value);
  if (trace.trace_id === state.sent && trace.depth === 1) {
    const reply = $("reply");
    reply.textContent = state.tokens.get(trace.span_id);
  }
}

function renderAll() {
  for (const trace of state.traces.values()) render(trace);
}

function render(trace) {
  const spans = [...trace.spans.values()].sort((a, b) => a.start - b.start);
  const ids = new Set(spans.map((s) => s.span_id));
  const children = new Map();
  const roots = [];
  for (const span of spans) {
    if (span.parent_span_id && ids.has(span.parent_span_id)) {
      if (!children.has(span.parent_span_id)) children.set(span.parent_span_id, []);
      children.get(span.parent_span_id).push(span);
    } else {
      roots.push(span);
    }
  }
  const now = Date.now() / 1000;
  const begin = spans.length ? spans[0].start : now;
  const finish = Math.max(begin, ...spans.map((s) => s.end || now));
  const total = Math.max(finish - begin, 1e-6);
  const running = spans.some((s) => s.status === "running");
  const errors = spans.filter((s) => s.status === "error").length;
  const marks = spans.flatMap((s) => s.marks || []).map((m) => m.kind);

  const head = h("header", "trace-head",
    h("b", null, roots.map(label).join(", ") || (trace.sent ? trace.sent.agent : "…")),
    trace.sent ? h("span", "dim clip", `“${trace.sent.text}”`) : null,
    h("span", "grow"),
    marks.length ? h("span", "mark", [...new Set(marks)].join(", ")) : null,
    errors ? h("span", "badge bad", plural(errors, "error")) : null,
    running
      ? h("span", "dur running", `running ${ms((now - begin) * 1000)}`)
      : h("span", "dur", ms(total * 1000)),
    h("span", "dim small", plural(spans.length, "span")
      + (spans.length ? ` · ${clock(begin)}` : "")),
    h("span", "dim mono small", trace.id.slice(0, 8)));

  const models = $("show-models").checked;
  const row = (span, depth) => {
    const kids = (children.get(span.span_id) || []).filter((k) => models || k.kind !== "model");
    const cls = `span kind-${span.kind.replace(".", "-")} ${span.status}`;
    const node = h("li", cls, spanRow(span, begin, total, now, trace.id));
    const runs = span.kind === "agent" && span.status === "running";
    const tokens = runs ? state.tokens.get(span.span_id) : null;
    if (tokens) node.append(h("div", "tokens", tokens.slice(-160)));
    if (kids.length) node.append(h("ul", null, kids.map((k) => row(k, depth + 1))));
    return node;
  };
  trace.el.classList.toggle("has-error", errors > 0);
  trace.el.replaceChildren(head, h("ul", "tree", roots.map((r) => row(r, 0))));
}

function label(span) {
  const a = span.attributes || {};
  if (span.kind === "mcp.server") return `MCP server ← ${a.tool || span.name}`;
  if (span.kind === "a2a.server") return `A2A server ← ${a.agent || span.name}`;
  return span.name;
}

function spanRow(span, begin, total, now, traceId) {
  const a = span.attributes || {};
  const detail = [];
  if (span.kind === "agent" && a.model) detail.push(`${a.provider}/${a.model}`);
  if ((span.kind === "agent" || span.kind === "model") && a.input_tokens !== undefined) {
    detail.push(`${a.input_tokens}→${a.output_tokens} tokens`);
  }
  if (span.kind === "agent" && a.stop_reason && a.stop_reason !== "end_turn") {
    detail.push(a.stop_reason);
  }
  if (span.kind === "a2a.server" && a.state) detail.push(`task ${a.state}`);
  if (span.kind === "tool" && a.outcome && a.outcome !== "ok") detail.push(a.outcome);

  const end = span.end || now;
  const bar = h("span", "bar", h("span", "fill"));
  bar.firstChild.style.marginLeft = `${(100 * (span.start - begin)) / total}%`;
  bar.firstChild.style.width = `${Math.max((100 * (end - span.start)) / total, 0.5)}%`;

  const running = span.status === "running";
  return h("div", "row",
    h("span", "kind", span.kind),
    h("span", "name", label(span)),
    detail.length ? h("span", "dim small", detail.join(" · ")) : null,
    (span.marks || []).map(markBadge),
    peerLink(span, traceId),
    h("span", "grow"),
    bar,
    running
      ? h("span", "dur running", ms((now - span.start) * 1000))
      : h("span", "dur", ms(span.duration_ms)),
    span.error ? h("div", "error-text", span.error) : null);
}

function markBadge(mark) {
  const text = mark.kind === "breaker"
    ? `breaker: depth ${mark.depth} > ${mark.max_depth}`
    : mark.kind.replace("_", " ");
  const node = h("span", `mark ${mark.kind}`, text);
  node.title = mark.message || "";
  return node;
}

function peerLink(span, traceId) {
  const a = span.attributes || {};
  if (!a.peer) return null;
  const where = h("span", "peer small", `→ ${a.peer.toUpperCase()} ${a.peer_name}`);
  const base = a.peer_dashboard ? httpUrl(a.peer_dashboard) : null;
  if (base && state.peers.get(`${a.peer}:${a.peer_name}`)) {
    const link = h("a", null, "open its tree there ↗");
    link.href = new URL(`/#trace=${traceId}`, base).href;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    where.append(" ", link);
  } else if (a.peer_url) {
    where.title = a.peer_url;
  }
  return where;
}

$("show-models").addEventListener("change", renderAll);

// ---- sending ----------------------------------------------------------------------------------

$("send-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const agent = $("send-agent").value;
  const text = $("send-text").value.trim();
  if (!agent || !text) return;
  // Our own trace id, so that the tree of this request is known before any event of it
  // (depth 0: this page is no agent, the first hop is the agent's).
  const traceId = randomHex(16);
  state.sent = traceId;
  const trace = traceOf(traceId);
  trace.sent = { agent, text };
  render(trace);
  const reply = $("reply");
  reply.hidden = false;
  reply.className = "reply streaming";
  reply.textContent = "…";
  $("send-button").disabled = true;
  try {
    const body = await api(`/api/agents/${encodeURIComponent(agent)}/message`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        traceparent: `00-${traceId}-${randomHex(8)}-01`,
        "X-Roost-Trace-Depth": "0",
      },
      body: JSON.stringify({ message: text }),
    });
    reply.textContent = body.reply;
    reply.className = body.is_error ? "reply error" : "reply";
  } catch (error) {
    reply.textContent = `error: ${error.message}`;
    reply.className = "reply error";
  } finally {
    $("send-button").disabled = false;
  }
});

// ---- start ------------------------------------------------------------------------------------

async function loadTraces() {
  const { traces } = await api("/api/traces?limit=20");
  for (const t of traces.reverse()) {
    for (const span of t.spans) traceOf(t.trace_id).spans.set(span.span_id, span);
  }
  const wanted = new URLSearchParams(location.hash.slice(1)).get("trace");
  if (wanted) {
    const held = await api(`/api/traces/${encodeURIComponent(wanted)}`).catch((error) => {
      notice(error.message);
      return null;
    });
    if (held) {
      const trace = traceOf(wanted);
      for (const span of held.spans) trace.spans.set(span.span_id, span);
      $("traces").prepend(trace.el);
      trace.el.classList.add("focus");
      trace.el.scrollIntoView();
    }
  }
  renderAll();
}

async function start() {
  api("/health").then((h) => { $("version").textContent = `v${h.version}`; }).catch(() => {});
  await loadAgents().catch(report);
  loadMcp().catch(report);
  loadA2A().catch(report);
  loadTraces().catch((error) => {
    if (error.status === 403) notice("traces need an admin key");
    else report(error);
  });
  connect();
}

// Running spans' durations grow while you watch.
setInterval(() => {
  for (const trace of state.traces.values()) {
    if ([...trace.spans.values()].some((s) => s.status === "running")) render(trace);
  }
}, 500);

start();

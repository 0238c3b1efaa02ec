"""The floor for stdio MCP: a minimal hand-written NDJSON server that answers every request
line with an echo result, no protocol work at all. Usage: ``python _mcp_ndjson_echo.py``."""

from __future__ import annotations

import json
import sys


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        params = request.get("params") or {}
        text = (params.get("arguments") or {}).get("text", "")
        reply = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"content": [{"type": "text", "text": text}], "isError": False},
        }
        out.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()

"""roost's daemon with one scripted echo agent, for ``bench/a2a.py``.

Usage: ``python _a2a_roost_server.py HOME PORT``; prints nothing, serves until killed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio


async def main(home: Path, port: int) -> None:
    from roost.kernel import default_config, open_kernel
    from roost.plugins.http import serve

    agents = home / "agents" / "echo"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / "agent.json").write_text(
        json.dumps(
            {
                "name": "echo",
                "description": "Echoes text",
                "version": "0.1.0",
                "model": {
                    "provider": "scripted",
                    "name": "rules",
                    "script": {"rules": [{"match": ".", "reply": "echo: {message}"}]},
                },
            }
        )
    )
    config = default_config(
        home=str(home),
        agents={"dirs": [str(home / "agents")], "bundled": False},
        http={"port": port, "rate_limit_per_s": 1_000_000, "rate_limit_burst": 1_000_000},
        a2a={"max_tasks": 100_000},
    )
    async with open_kernel(config) as kernel:
        await serve(kernel, host="127.0.0.1", port=port, write_daemon_json=False)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]))

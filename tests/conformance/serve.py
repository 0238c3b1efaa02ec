"""Serve a roost daemon with the conformance fixture plugin on 127.0.0.1 (for run_server.sh).

Prints the base URL on stdout once listening; runs until killed (SIGTERM/SIGINT).
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

import conformance_plugin  # noqa: E402
from roost.kernel import default_config, open_kernel  # noqa: E402
from roost.plugins.http import serve  # noqa: E402


async def main(home: str, port: int) -> None:
    config = default_config(
        home=Path(home),
        agents={"bundled": False},
        http={"rate_limit_per_s": 10000, "rate_limit_burst": 10000},
    )
    async with open_kernel(
        config, agents=[conformance_plugin.conformance_agent()], plugins=[conformance_plugin]
    ) as kernel:
        async with trio.open_nursery() as nursery:
            host, bound = await nursery.start(
                lambda task_status: serve(
                    kernel, host="127.0.0.1", port=port, task_status=task_status
                )
            )
            print(f"http://{host}:{bound}", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)

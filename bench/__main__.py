"""``python -m bench [--quick] [--only NAME ...] [--json]``: run the benchmarks, print a table."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback

from . import Row, format_table


def discover() -> list[str]:
    """Benchmark module names in this package (helpers start with ``_``)."""
    import bench

    return sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_")
    )


def main(argv: list[str] | None = None) -> int:
    names = discover()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a few seconds)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=names,
        metavar="NAME",
        help=f"run only these: {', '.join(names)}",
    )
    parser.add_argument("--json", action="store_true", help="print rows as JSON instead of a table")
    args = parser.parse_args(argv)

    rows: list[Row] = []
    started = time.perf_counter()
    for name in args.only or names:
        try:
            module = importlib.import_module(f"bench.{name}")
            rows.extend(module.run(args.quick))
        except Exception as exc:  # one broken bench must not hide the others
            traceback.print_exc(file=sys.stderr)
            rows.append(Row(name, None, "", note=f"failed: {type(exc).__name__}: {exc}"))
    if args.json:
        print(json.dumps([row.to_dict() for row in rows], indent=2, ensure_ascii=False))
    else:
        print(format_table(rows))
        mode = "quick" if args.quick else "full"
        print(
            f"\n{mode} run in {time.perf_counter() - started:.1f}s; ratios are roost / floor "
            "measured in this run; targets never fail the run."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

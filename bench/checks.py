"""The checks on every request and log line, each next to a floor:

- a 4,000-character log line with 40 credentials registered vs the same line with 3: a
  text is read once per kind of form (literal, percent-encoded), so more credentials must
  not multiply the cost;
- a 10 MB tool result holding no credential vs ``json.dumps`` of it: the check runs at the
  speed of the C encoder, not of a Python walk over every object;
- ``check_json_input`` (lone surrogates, non-finite numbers) of 200,000 ASCII strings and
  integers vs ``json.dumps`` of them: the walk skips what it cannot refuse.
"""

from __future__ import annotations

import json
import random
import string
import time
import timeit

from roost.kernel import check_json_input, redact

from . import Row, Target


def _secrets(count: int) -> list[str]:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits

    def one(n: int) -> str:  # key-like ones, and ones with characters every form escapes
        body = "".join(rng.choice(alphabet) for _ in range(32))
        return ("sk-", "ghp_", "xoxb-", "")[n % 4] + body + ("", "", "", '/"\\+é')[n % 4]

    return [one(n) for n in range(count)]


def _line_us(secrets: list[str], repeat: int) -> float:
    line = ('the peer said {"error": "bad gateway"} for http://127.0.0.1:8470/api ' * 60)[:4000]
    redact(line, secrets)  # the pattern is built once per set of credentials
    best = min(timeit.repeat(lambda: redact(line, secrets), number=50, repeat=repeat))
    return best / 50 * 1e6


def _best_of_3(floor_work, work) -> tuple[float, float]:
    """Milliseconds of CPU, best of three, of ``work()`` and of ``floor_work()``."""
    value = floor = float("inf")
    for _ in range(3):
        started = time.process_time()
        floor_work()
        floor = min(floor, time.process_time() - started)
        started = time.process_time()
        work()
        value = min(value, time.process_time() - started)
    return value * 1000, floor * 1000


def _result_ms(rows: int) -> tuple[float, float]:
    result = {"rows": [{"id": n, "name": "row"} for n in range(rows)]}
    return _best_of_3(
        lambda: json.dumps(result, ensure_ascii=False), lambda: redact(result, ["tok-secret"])
    )


def _walk_ms(items: int) -> tuple[float, float]:
    value = {"items": [f"item-{n}" if n % 2 else n for n in range(items)]}
    return _best_of_3(
        lambda: json.dumps(value, ensure_ascii=False), lambda: check_json_input(value, "params")
    )


def run(quick: bool) -> list[Row]:
    secrets = _secrets(40)
    repeat = 3 if quick else 7
    many, few = _line_us(secrets, repeat), _line_us(secrets[:3], repeat)
    value, floor = _result_ms(20_000 if quick else 200_000)
    walk, dumps = _walk_ms(20_000 if quick else 200_000)
    return [
        Row(
            "log line, 40 credentials",
            many,
            "µs",
            few,
            "3 credentials",
            Target("ratio", "<=", 5),
        ),
        Row(
            "tool result without a credential",
            value,
            "ms",
            floor,
            "json.dumps",
            Target("ratio", "<=", 2),
        ),
        Row(
            "check_json_input, long list", walk, "ms", dumps, "json.dumps", Target("ratio", "<=", 1)
        ),
    ]

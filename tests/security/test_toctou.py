"""Item 4: a parent directory swapped for a symlink between check and open.

A real thread swaps ``d`` (a directory in the workspace) with ``swap`` (a symlink to a
directory outside it) with ``renameat2(RENAME_EXCHANGE)`` as fast as it can, while the
agent writes ``d/f<i>.txt`` through the kernel 400 times. Every write must land in the
workspace or be refused; none may land outside. Run with ``openat2`` and with the
per-component ``O_NOFOLLOW`` walk used where the kernel lacks it.
"""

from __future__ import annotations

import ctypes
import os
import threading

import pytest
import trio
from roost.kernel import ToolCall
from security_targets import open_kernel_target

ATTEMPTS = 400
AT_FDCWD = -100
RENAME_EXCHANGE = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: bytes, b: bytes) -> int:
    return _libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)


def _racer(a: bytes, b: bytes, stop: threading.Event, swaps: list[int]) -> None:
    n = 0
    while not stop.is_set():
        if _exchange(a, b) == 0:
            n += 1
    swaps.append(n)


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    from roost.plugins.tools import _beneath

    if request.param == "openat2" and not _beneath.USE_OPENAT2:
        pytest.skip("this kernel has no openat2 (Linux < 5.6)")
    monkeypatch.setattr(_beneath, "USE_OPENAT2", request.param == "openat2")
    return request.param


async def test_write_never_lands_outside_while_a_parent_is_swapped_for_a_symlink(
    tmp_path, monkeypatch, resolver
):
    opener, home, _ = open_kernel_target(tmp_path, monkeypatch)
    outside = tmp_path / "outside"
    outside.mkdir()
    async with opener as kernel:
        workspace = kernel.workspace_for(kernel.agents["attacker"])
        (workspace / "d").mkdir()
        (workspace / "swap").symlink_to(outside, target_is_directory=True)
        a, b = bytes(workspace / "d"), bytes(workspace / "swap")
        assert _exchange(a, b) == 0 and _exchange(a, b) == 0, os.strerror(ctypes.get_errno())
        stop, swaps = threading.Event(), []
        racer = threading.Thread(target=_racer, args=(a, b, stop, swaps), daemon=True)
        racer.start()
        written = refused = 0
        try:
            with trio.fail_after(120):
                for i in range(ATTEMPTS):
                    result = await kernel.call_tool(
                        "attacker",
                        ToolCall(name="write", arguments={"path": f"d/f{i}.txt", "content": "x"}),
                    )
                    if result.is_error:
                        assert "symbolic link" in result.as_text(), result.as_text()
                        refused += 1
                    else:
                        written += 1
        finally:
            stop.set()
            racer.join(timeout=10)
    escaped = sorted(p.name for p in outside.iterdir())
    assert escaped == [], f"{len(escaped)} of {ATTEMPTS} writes landed outside the workspace"
    assert swaps and swaps[0] > ATTEMPTS, f"the race barely ran ({swaps})"
    assert written + refused == ATTEMPTS and written > 0 and refused > 0, (written, refused)
    inside = {p.name for d in ("d", "swap")
              if (workspace / d).is_dir() and not (workspace / d).is_symlink()
              for p in (workspace / d).iterdir()}  # fmt: skip
    assert len(inside) == written

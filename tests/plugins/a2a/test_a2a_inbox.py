"""Files sent to an agent: saved under its workspace's inbox, bounded, never through links."""

from __future__ import annotations

import os
import threading

import pytest
from roost.plugins.a2a import _inbox
from roost.plugins.a2a import _models as m


def test_folders_are_hashes_of_the_task_id():
    names = {
        _inbox.folder_of(t)
        for t in ("..", ".", "a/b", "a_b", "job:1", "job 1", "тест1", "абв1", "x" * 300, "x" * 299)
    }
    assert len(names) == 10 and all(
        n.startswith("t-") and "/" not in n and "." not in n for n in names
    )


@pytest.mark.parametrize(
    "filename, expected",
    [
        ("report.pdf", "report.pdf"),
        ("отчёт.pdf", "отчёт.pdf"),  # was saved as "pdf"
        ("../../etc/passwd", "passwd"),
        ("C:\\\\Windows\\\\evil.exe", "evil.exe"),
        (".hidden", "file-3.hidden"),
        ("a\x00b.txt", "a_b.txt"),
        (None, "file-3"),
        ("...", "file-3"),
        ("é" * 300 + ".csv", "é" * 75 + ".csv"),  # 150 bytes of stem, the suffix kept
    ],
)
def test_safe_names_keep_the_suffix_and_fit(filename, expected):
    assert _inbox.safe_name(filename, 2) == expected


def test_files_are_bounded_per_message_and_per_task(tmp_path):
    parts = [m.Part(raw=b"x", filename="a") for _ in range(_inbox.MAX_FILES_PER_MESSAGE + 5)]
    saved = _inbox.save_files(tmp_path, "t", parts)
    assert sum(1 for s in saved if s and s.startswith("inbox/")) == _inbox.MAX_FILES_PER_MESSAGE
    assert saved[-1].startswith("(not saved: at most")
    big = [
        m.Part(raw=b"\0" * (_inbox.MAX_TASK_BYTES - 100), filename="big.bin"),
        m.Part(raw=b"\0" * 200, filename="more.bin"),
    ]
    saved = _inbox.save_files(tmp_path, "u", big)
    assert saved[0].startswith("inbox/") and saved[1].startswith(
        "(not saved: a task's files may total at most 16 MiB"
    )


def test_many_clashing_names_cost_one_step_each(tmp_path):
    import time

    parts = [m.Part(raw=b"", filename="a") for _ in range(_inbox.MAX_FILES_PER_MESSAGE)]
    start = time.perf_counter()
    saved = _inbox.save_files(tmp_path, "t", parts)
    assert time.perf_counter() - start < 5
    assert len(set(saved)) == len(parts)


def test_removal_never_follows_a_link_swapped_in_for_the_inbox(tmp_path):
    # Regression: the inbox was checked, then removed by path; an agent swapping it for a
    # link in between made rmtree delete outside the workspace.
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    victim = outside / _inbox.folder_of("t")
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("keep")
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            try:
                os.symlink(outside, workspace / "inbox")
                os.unlink(workspace / "inbox")
                os.mkdir(workspace / "inbox")
                os.mkdir(workspace / "inbox" / _inbox.folder_of("t"))
                os.rmdir(workspace / "inbox" / _inbox.folder_of("t"))
                os.rmdir(workspace / "inbox")
            except OSError:
                pass

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for _ in range(3000):
            _inbox.remove_task_folders([workspace], ["t"])
    finally:
        stop.set()
        swapper.join()
    assert (victim / "keep.txt").read_text() == "keep"

import json
import os

from roost.plugins.http import (
    DaemonInfo,
    daemon_file,
    pid_alive,
    read_daemon_file,
    remove_daemon_file,
    write_daemon_file,
)


def test_write_then_read_round_trips(tmp_path):
    info = write_daemon_file(tmp_path / "new-home", "127.0.0.1", 8471)
    assert info.pid == os.getpid()
    assert read_daemon_file(tmp_path / "new-home") == info
    assert info.url == "http://127.0.0.1:8471"
    assert DaemonInfo(1, "::1", 80, 0.0).url == "http://[::1]:80"


def test_missing_or_malformed_file_reads_as_none(tmp_path):
    assert read_daemon_file(tmp_path) is None
    for text in [
        "",
        "{",
        "[]",
        '{"pid": "1", "host": "h", "port": 1}',
        '{"pid": 1, "host": "h", "port": 0}',
        '{"pid": 1, "host": "h"}',
        '{"pid": -5, "host": "h", "port": 8}',
    ]:
        daemon_file(tmp_path).write_text(text)
        assert read_daemon_file(tmp_path) is None, text


def test_remove_leaves_a_file_another_daemon_wrote(tmp_path):
    mine = write_daemon_file(tmp_path, "127.0.0.1", 1000)
    daemon_file(tmp_path).write_text(
        json.dumps({"pid": mine.pid + 1, "host": "127.0.0.1", "port": 2000})
    )
    remove_daemon_file(tmp_path, mine)
    assert daemon_file(tmp_path).exists()
    remove_daemon_file(tmp_path, read_daemon_file(tmp_path))
    assert not daemon_file(tmp_path).exists()
    remove_daemon_file(tmp_path, mine)  # already gone: no error


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(2**22 + 12345)  # above the default pid_max

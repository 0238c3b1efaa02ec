"""``_proctrace``'s helpers (``ProcessTraces`` itself: tests/security/test_trace_processes.py)."""

from __future__ import annotations

import os
import socket
import sys

import pytest
from roost.kernel import _proctrace

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def test_socket_inode_reads_both_tables_and_ignores_what_it_cannot_match():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        conn, peer = listener.accept()
        with client, conn:
            inode = _proctrace.socket_inode(peer, conn.getsockname())
            assert inode == os.fstat(client.fileno()).st_ino
            # as a dual-stack server sees the same peer
            assert (
                _proctrace.socket_inode(
                    (f"::ffff:{peer[0]}", peer[1]),
                    (f"::ffff:{conn.getsockname()[0]}", conn.getsockname()[1]),
                )
                == inode
            )
            assert _proctrace.socket_inode(("127.0.0.1", 1), conn.getsockname()) is None
            assert _proctrace.socket_inode(("not an address", 1), conn.getsockname()) is None


def test_process_traces_are_hashable_and_equal_only_to_themselves():
    # ProcessTraces is an attrs class (d380a5e): attrs' default eq would make it unhashable.
    a, b = _proctrace.ProcessTraces(), _proctrace.ProcessTraces()
    assert a != b and len({a, b, a}) == 2

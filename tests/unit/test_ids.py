"""Request ids (gateway/core/ids.py): 128 random bits each, drawn in blocks, never repeated, and a
forked child (a worker) does not hand out the ids its parent is about to."""

from __future__ import annotations

import os

from gateway.core.ids import BLOCK_BYTES, RandomIds, ids


def test_ids_are_128_bits_and_never_repeat_across_blocks():
    source = RandomIds()
    drawn = [source.next() for _ in range(3 * BLOCK_BYTES // 16 + 5)]  # three blocks and into a fourth
    assert all(len(one) == 32 and int(one, 16) >= 0 for one in drawn)
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_does_not_repeat_the_ids_its_parent_hands_out_next():
    ids.next()  # the parent has a block under way
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, ids.next().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child != ids.next()

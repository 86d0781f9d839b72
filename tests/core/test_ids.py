"""Ids cannot be predicted from earlier ones.

The reproduction: run ids came from a Mersenne Twister, whose whole state can be read back from
624 of its 32-bit outputs — 208 ids of 96 bits. One organization, from 208 of its own run ids,
predicted another's next ones. The attack is repeated here on `new_hex_id` itself.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

from core.ids import new_hex_id
from tests.support.servers import ROOT

MT_WORDS = 624
WORDS_PER_ID = 3  # 24 hex digits: three 32-bit outputs, the first one the lowest bits


def _undo_right_shift_xor(value: int, shift: int) -> int:
    result = value
    for _ in range(32 // shift + 1):
        result = value ^ (result >> shift)
    return result & 0xFFFFFFFF


def _undo_left_shift_xor_and(value: int, shift: int, mask: int) -> int:
    result = value
    for _ in range(32 // shift + 1):
        result = value ^ ((result << shift) & mask)
    return result & 0xFFFFFFFF


def untemper(output: int) -> int:
    """The Mersenne Twister state word behind one of its 32-bit outputs."""
    value = _undo_right_shift_xor(output, 18)
    value = _undo_left_shift_xor_and(value, 15, 0xEFC60000)
    value = _undo_left_shift_xor_and(value, 7, 0x9D2C5680)
    return _undo_right_shift_xor(value, 11)


def predicted_next_id(seen: list[str]) -> str:
    """The id a Mersenne Twister would give after `seen` (208 ids), cloned from them."""
    words = [
        (int(hex_id, 16) >> (32 * position)) & 0xFFFFFFFF
        for hex_id in seen
        for position in range(WORDS_PER_ID)
    ]
    assert len(words) == MT_WORDS
    clone = random.Random()
    clone.setstate((3, (*(untemper(word) for word in words), MT_WORDS), None))
    return f"{clone.getrandbits(96):024x}"


def test_the_attack_predicts_a_mersenne_twister() -> None:
    """The attack below works: on `random`, 208 ids give the next one away."""
    generator = random.Random(int.from_bytes(os.urandom(32), "big"))
    seen = [f"{generator.getrandbits(96):024x}" for _ in range(MT_WORDS // WORDS_PER_ID)]

    assert predicted_next_id(seen) == f"{generator.getrandbits(96):024x}"


def test_the_next_id_cannot_be_predicted_from_earlier_ones() -> None:
    seen = [new_hex_id() for _ in range(MT_WORDS // WORDS_PER_ID)]

    assert predicted_next_id(seen) != new_hex_id()


def test_ids_are_24_hex_digits_and_distinct() -> None:
    ids = {new_hex_id() for _ in range(10_000)}

    assert len(ids) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{24}", hex_id) for hex_id in ids)


def test_a_forked_process_makes_ids_of_its_own() -> None:
    """A worker forked from a parent that made ids does not repeat the parent's next ones."""
    script = (
        "import os, sys\n"
        "from core.ids import new_hex_id\n"
        "new_hex_id()\n"
        "reader, writer = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.write(writer, new_hex_id().encode()); os._exit(0)\n"
        "os.wait()\n"
        "print(os.read(reader, 24).decode(), new_hex_id())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    child, parent = result.stdout.split()

    assert child != parent

"""``I/N`` shard arguments, shared by the sharded tools (upstream tests, fuzzer)."""

from __future__ import annotations


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``; ValueError unless 1 <= I <= N."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not sep or not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N")
    return i, n

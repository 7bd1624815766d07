"""Read the loop structure of Inductor's generated C++.

Tests, the demo and the benchmarks all ask the same question of a generated
module: how many separate loop nests does each kernel run?  A kernel whose
outer loops were fused shows one nest; a fallback shows one nest per kernel of
the group.  The answer comes from the text alone, so it works on code from
stock and patched torch alike.
"""

from __future__ import annotations

import dataclasses
import re

_KERNEL_START = re.compile(r'^extern "C"\s.*?\bkernel\(', re.MULTILINE)
_FOR_LINE = re.compile(r"^(?P<indent>[ ]*)for\(")


@dataclasses.dataclass
class KernelLoops:
    """Loop nests of one C++ kernel function."""

    nests: int
    text: str


def split_kernels(code: str) -> list[str]:
    """Return the text of each ``extern "C" ... kernel(...)`` function."""
    starts = [m.start() for m in _KERNEL_START.finditer(code)]
    kernels = []
    for begin, end in zip(starts, starts[1:] + [len(code)]):
        kernels.append(_function_body(code[begin:end]))
    return kernels


def _function_body(text: str) -> str:
    """Cut ``text`` after the brace that closes the first function body."""
    depth = 0
    opened = False
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
            opened = True
        elif ch == "}":
            depth -= 1
            if opened and depth == 0:
                return text[: i + 1]
    return text


def top_level_nests(kernel_text: str) -> int:
    """Count the outermost ``for`` loops of a kernel function.

    A loop is outermost when no other ``for`` loop encloses it; we track brace
    depth and remember the depths at which open loops started.
    """
    nests = 0
    depth = 0
    loop_depths: list[int] = []
    for line in kernel_text.splitlines():
        if _FOR_LINE.match(line):
            while loop_depths and loop_depths[-1] >= depth:
                loop_depths.pop()
            if not loop_depths:
                nests += 1
            loop_depths.append(depth)
        depth += line.count("{") - line.count("}")
        if "}" in line:
            while loop_depths and loop_depths[-1] >= depth:
                loop_depths.pop()
    return nests


def analyze(code: str) -> list[KernelLoops]:
    """Loop nests of every kernel in a generated module, in order."""
    return [
        KernelLoops(
            nests=top_level_nests(text),
            text=text,
        )
        for text in split_kernels(code)
    ]


def count_nests(code: str) -> int:
    """Total number of separate loop nests over all kernels of a module."""
    return sum(k.nests for k in analyze(code))

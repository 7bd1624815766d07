"""Prefetch the next rows during the last pass of an outer-loop fused kernel.

An outer-loop fused normalization reads each row (a LayerNorm row, a
GroupNorm group) several times per outer iteration: its first pass from
memory, the later passes from cache.  Only the first pass waits for memory,
and the hardware prefetcher, which stops at every 4 KiB page, does not run
ahead of it: LayerNorm over (8192, 1024) has one page per row.  Meanwhile the
last pass works from cache and leaves the memory bus idle for reads.

In the last pass we therefore prefetch, for every vector load of a row that
the first pass reads too, the same offset LOOKAHEAD_BYTES ahead, rounded up to
whole outer iterations; a row the last pass does not read (softmax's last
pass reads a local buffer of exp values) is prefetched in the last pass's
loop that has the same header as the first pass's (softmax over (4096,
4096): 0.82 of the time without, 1 thread).  Distances: LayerNorm, 4 rows
of 4 KiB; GroupNorm(32, 256) on 56x56 images, 1 group of 98 KiB.  The next
iterations' first passes then read from cache.  Measured on the generated
kernels (2 cores, AVX512), kernel time over eager's: LayerNorm
(8192, 1024) 0.81 -> 0.65 on two threads, unchanged on one; GroupNorm
0.88 -> 0.79 on two threads, 0.71 -> 0.64 on one.  A prefetch of one
LayerNorm row ahead was slower on one thread (0.72 -> 0.92): it arrives
too late and takes the fill buffers the output stores need.

Guards: the kernel touches more bytes than the last-level cache holds (else
the rows come from cache anyway; the size is the one streaming stores use),
the load is a full float vector whose index is affine in the fused loop
variable with a static stride, the first pass loads the same memory (an
in-place buffer is in_ptr0 there and in_out_ptr0 in the last pass), and
that buffer is at least 1/32 of the cache: a 256 KiB attention mask stays
cached and gains nothing.  A first pass that calls transcendental
functions is bound by its math, not by memory, and gets no prefetches
(bias+GELU+LayerNorm's, with erf, ran 14-16% slower with them).
A prefetch never faults, so the rows past the end of a thread's share or of
the tensor cost a wasted line, not a crash.  The prefetch is a helper of
cpp_kernel_helpers.py: ``__builtin_prefetch`` on GCC and Clang,
``_mm_prefetch`` / ``__prefetch`` on MSVC.

Flag: ``config.cpp.outer_loop_prefetch`` (TORCHINDUCTOR_CPP_OUTER_LOOP_PREFETCH).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable

import sympy

from ..utils import IndentedBuffer
from . import cpp_kernel_helpers as helpers, cpp_streaming_stores as streaming
from .cpp_invariant_loads import memory_of
from .cpp_reduction_accumulators import TRANSCENDENTAL
from .cpp_streaming_stores import footprint_bytes, line_text

log = logging.getLogger("torch._inductor.fusion")

# How far ahead to prefetch, rounded up to whole outer iterations.
LOOKAHEAD_BYTES = 16 << 10
# `auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0 +
#      static_cast<int64_t>(x1 + 1024L*x0), static_cast<int64_t>(16));`
_VECTOR_LOAD = re.compile(
    r"^auto tmp\w+ = at::vec::Vectorized<float>::loadu\("
    r"(?P<ptr>(?:in_ptr|in_out_ptr)\d+) \+ "
    r"(?P<index>static_cast<int64_t>\((?P<expr>[^,;]*)\))"
    r"(?:, static_cast<int64_t>\(\d+L?\))?\);$"
)
# `1024L*x0`, `x1`, `7L`: the terms of an affine index.
_TERM = re.compile(r"^(?:(?P<coeff>\d+)L\*)?(?P<var>x\d+)$|^(?P<const>\d+)L?$")


def gen_passes_with_prefetch(
    code: IndentedBuffer, outer_nest, kernel, gen_loop_nest: Callable
) -> None:
    """Generate the passes of an outer-loop fused kernel, prefetching in the last."""
    starts = []
    for inner_nest in kernel.inner:
        starts.append(len(code._lines))
        gen_loop_nest(inner_nest)
    if len(starts) < 2 or not outer_nest.loops:
        return
    if footprint_bytes(kernel.args) < streaming.last_level_cache_bytes():
        return
    outer = outer_nest.loops[-1]
    if not isinstance(outer.steps, (int, sympy.Integer)):
        return  # a symbolic step (dynamic shapes)
    rows = _Rows(kernel.args, str(outer.var), int(outer.steps))
    first_pass = code._lines[starts[0] : starts[1]]
    if _computes_transcendentals(first_pass):
        # bound by its math, not by memory: bias+GELU+LayerNorm's first pass
        # (erf) ran 14-16% slower with its rows prefetched
        return
    loads = [
        (m, header)
        for m, header in _loads_with_headers(first_pass)
        if rows.worth_prefetching(m)
    ]
    last_pass = code._lines[starts[-1] :]
    rewritten = _with_prefetches(last_pass, rows, loads)
    if rewritten is None:
        return
    code._lines[starts[-1] :] = rewritten
    helpers.use(kernel.args, helpers.PREFETCH)


class _Rows:
    """The fused loop's rows, as the first pass reads them."""

    def __init__(self, args, outer_var: str, step: int):
        self.args, self.outer_var, self.step = args, outer_var, step

    def memory(self, pointer: str) -> str:
        # memories, not pointers: an in-place buffer is in_ptr0 in the first
        # pass and in_out_ptr0 in the last (attention's softmax)
        return memory_of(self.args, pointer)

    def worth_prefetching(self, load: re.Match) -> bool:
        return bool(self.ahead(load)) and _too_large_to_stay_cached(
            self.args, load["ptr"]
        )

    def ahead(self, load: re.Match) -> int:
        """Bytes to the same offset LOOKAHEAD_BYTES ahead in whole rows, or 0."""
        stride = _coefficient(load["expr"], self.outer_var)
        if not stride:
            return 0
        row_bytes = stride * self.step * 4  # float32
        return math.ceil(LOOKAHEAD_BYTES / row_bytes) * row_bytes


def _with_prefetches(lines, rows: _Rows, first_pass_loads) -> list | None:
    """The last pass with prefetches of the first pass's rows, or None.

    A load of the same memory in the last pass gets a prefetch right after
    it.  A row the last pass does not read (softmax's last pass reads its
    local buffer of exp values) is prefetched in the last pass's loop that
    has the same header as the first pass's loop around the load, so the
    load's index means the same there.
    """
    memories = {rows.memory(m["ptr"]) for m, _ in first_pass_loads}
    result: list = []
    covered = set()
    for line in lines:
        result.append(line)
        match = _vector_load(line)
        if match is None or rows.memory(match["ptr"]) not in memories:
            continue
        ahead = rows.ahead(match)
        if not ahead:
            continue
        result.append(_prefetch(line_text(line), match, ahead))
        covered.add(rows.memory(match["ptr"]))
    for load, header in first_pass_loads:
        if rows.memory(load["ptr"]) in covered or header is None:
            continue
        if _insert_in_loop(result, header, load, rows):
            covered.add(rows.memory(load["ptr"]))
    if not covered:
        return None
    log.debug("outer-loop prefetch: %d rows of the last pass", len(covered))
    return result


def _computes_transcendentals(lines) -> bool:
    return any(TRANSCENDENTAL.search(line_text(line)) for line in lines)


def _loads_with_headers(lines):
    """Each full vector load with the innermost loop header above it."""
    header = None
    for line in lines:
        text = line_text(line).strip()
        if text.startswith("for("):
            header = text
        match = _VECTOR_LOAD.match(text)
        if match is not None:
            yield match, header


def _insert_in_loop(lines: list, header: str, load: re.Match, rows: _Rows) -> bool:
    """Prefetch ``load``'s row before the first statement of the loop of
    ``lines`` whose header is ``header``; False if there is no such loop or
    the index uses a variable other than the loop's and the outer one."""
    loop_var = re.match(r"for\(int64_t (x\d+)=", header)
    used = set(re.findall(r"\bx\d+\b", load["expr"]))
    if loop_var is None or not used <= {loop_var[1], rows.outer_var}:
        return False
    texts = [line_text(line).strip() for line in lines]
    if header not in texts:
        return False
    start = texts.index(header)
    for index in range(start + 1, len(lines)):
        if texts[index].startswith("for("):
            return False  # a nested loop first: not the same iteration space
        if texts[index].startswith("auto "):
            text = line_text(lines[index])
            lines.insert(index, _prefetch(text, load, rows.ahead(load)))
            return True
    return False


def _prefetch(line: str, load: re.Match, ahead: int) -> str:
    call = f"{helpers.PREFETCH}({load['ptr']} + {load['index']}, {ahead});"
    return _indent(line) + call


def _too_large_to_stay_cached(args, pointer: str) -> bool:
    """Whether the buffer behind ``pointer`` is one a pass evicts: at least
    the share of the cache below which streaming stores leave outputs alone
    (an attention mask of 256 KiB stays in cache and gains nothing)."""
    minimum = streaming.last_level_cache_bytes() // streaming.MIN_STREAMED_FRACTION
    names = streaming.buffer_names(args, pointer)
    return any(streaming.buffer_bytes(name) >= minimum for name in names)


def _vector_load(line) -> re.Match | None:
    text = line_text(line)
    return _VECTOR_LOAD.match(text.strip()) if text else None


def _coefficient(expr: str, var: str) -> int:
    """The static coefficient of ``var`` in an affine C index, else 0."""
    coefficient = 0
    for term in expr.split(" + "):
        match = _TERM.match(term.strip())
        if match is None:
            return 0
        if match["var"] == var:
            coefficient += int(match["coeff"] or 1)
    return coefficient


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


"""Non-temporal (streaming) stores for outputs that cannot stay in cache.

A normalization over a tensor larger than the last-level cache is bound by
memory bandwidth once its loops are fused (LayerNorm (8192, 1024): the
input is read once, the output written once).  A plain vector store first
reads the output's cache line from memory (write-allocate), so the kernel
moves three bytes per two it needs.  Eager pays the same; a streaming store
(``_mm512_stream_ps``) writes the line without reading it.

It only pays when nobody reads the output from cache soon.  We stream the
full-vector float32 stores of a kernel's output when

- the kernel touches more bytes than the last-level cache holds (inputs and
  outputs together, less the inputs an earlier kernel of the graph wrote
  that fit in the cache), so by the time a consumer reads the output from
  its start, a sequential pass has evicted it anyway;
- the output is at least 1/MIN_STREAMED_FRACTION of the cache (1 MiB of
  32 MiB; small outputs stay cached);
- the kernel does not read that output back itself (directly or through an
  in-place alias).

Each streamed store checks its address at run time and falls back to a plain
store when it is not aligned to the vector width; other vector types store
as before.  Streaming stores are weakly ordered: every thread fences its own
(``stream_fence()`` at the end of each ``#pragma omp parallel`` block, before
the closing barrier that publishes them), and the kernel ends with one more
fence for its serial loops.  The store and the fence are helpers of
cpp_kernel_helpers.py: ``_mm512_stream_ps`` / ``_mm256_stream_ps`` and
``_mm_sfence`` on AVX512 and AVX2, a plain store and no fence elsewhere.
With two threads, streaming measured 15% faster
than plain stores on LayerNorm (8192, 1024) and GroupNorm(32, 256) once
``cpp_outer_loop_prefetch.py`` prefetches their rows (without the
prefetches, GroupNorm read the same either way).

Flag: ``config.cpp.streaming_stores`` (TORCHINDUCTOR_CPP_STREAMING_STORES).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import sympy
import torch

from ..utils import DeferredLineBase, IndentedBuffer
from ..virtualized import V
from . import cpp_kernel_helpers as helpers
from .cpp_invariant_loads import memory_of

# Outputs smaller than this fraction of the cache (1 MiB of 32 MiB) stay in
# cache for their consumer whatever the kernel does.
MIN_STREAMED_FRACTION = 32
_FALLBACK_LLC_BYTES = 32 << 20
# Overrides the cache size read from sysfs (to exercise streaming on small
# programs, as the fuzzer's streaming run does, or where sysfs is wrong).
CACHE_BYTES_ENV = "TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES"

_FENCE = f"{helpers.STREAM_FENCE}();"
# `tmp15.store(out_ptr2 + static_cast<int64_t>(x1 + 1024L*x0));`: a full
# vector (a tail store passes a count after a top-level comma).
_VECTOR_STORE = re.compile(
    r"^(?P<value>tmp\w+)\.store\((?P<ptr>(?:out_ptr|in_out_ptr)\d+) \+ "
    r"(?P<index>static_cast<int64_t>\([^,;]*\))\);$"
)
_ANY_VECTOR_STORE = re.compile(
    r"^tmp\w+\.store\((?:out_ptr|in_out_ptr)\d+ \+ static_cast<int64_t>\([^;]*\);$"
)


def stream_large_outputs(kernel_group, loops_code: IndentedBuffer) -> IndentedBuffer:
    """``loops_code`` with streaming stores where they pay, else unchanged."""
    args = kernel_group.args
    if cold_footprint_bytes(args) < last_level_cache_bytes():
        return loops_code
    lines = loops_code._lines
    streamed = _streamable_pointers(args, lines)
    if not streamed:
        return loops_code
    out = IndentedBuffer()
    for line in lines:
        text = line_text(line)
        match = _VECTOR_STORE.match(text.strip()) if text else None
        if match and match["ptr"] in streamed:
            indent = text[: len(text) - len(text.lstrip())]
            text = (
                f"{indent}{helpers.STREAM_STORE}({match['ptr']} + {match['index']}, "
                f"{match['value']});"
            )
            # stores are DeferredLines (dropped if their buffer is removed)
            line = line._new_line(text) if isinstance(line, DeferredLineBase) else text
        out._lines.append(line)
    fenced = _fence_parallel_regions(out._lines)
    if fenced is None:
        return loops_code
    out._lines = fenced
    out.writeline(_FENCE)
    helpers.use(args, helpers.STREAM_STORE)
    helpers.use(args, helpers.STREAM_FENCE)
    return out


def _fence_parallel_regions(lines: list) -> list | None:
    """``lines`` with a fence at the end of every ``#pragma omp parallel`` block.

    Each thread must fence its own streaming stores before the region's
    closing barrier: the fence after the loops only covers the calling
    thread.  None if a region is not a braced block.
    """
    result = []
    closing: list[str] = []  # the closing-brace lines of the open regions
    for index, line in enumerate(lines):
        text = line_text(line)
        if closing and text == closing[-1]:
            result.append(text.replace("}", "    " + _FENCE))
            closing.pop()
        result.append(line)
        if text.strip().startswith("#pragma omp parallel"):
            opening = line_text(lines[index + 1]) if index + 1 < len(lines) else ""
            if opening.strip() != "{":
                return None
            closing.append(opening.replace("{", "}"))
    return None if closing else result


@functools.cache
def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache level: $TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES,
    else sysfs, else 32 MiB."""
    override = os.environ.get(CACHE_BYTES_ENV, "")
    if override.isdigit():
        return int(override)
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text and text[-1] in units and text[:-1].isdigit():
            sizes.append(int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes, default=_FALLBACK_LLC_BYTES)


def _streamable_pointers(args, lines) -> set[str]:
    """Output pointers of large float32 buffers that the kernel only stores."""
    stored: set[str] = set()
    other_uses: set[str] = set()
    for line in lines:
        text = line_text(line)
        match = _VECTOR_STORE.match(text.strip())
        if match:
            stored.add(match["ptr"])
            other_uses.update(_pointers_in(match["index"]))
        elif not _ANY_VECTOR_STORE.match(text.strip()):  # a tail store is no read
            other_uses.update(_pointers_in(text))
    result = set()
    min_bytes = last_level_cache_bytes() // MIN_STREAMED_FRACTION
    used = {memory_of(args, p) for p in other_uses}
    for pointer in stored:
        names = buffer_names(args, pointer)
        if not names or memory_of(args, pointer) in used:
            continue
        if all(
            _dtype(name) == torch.float32 and buffer_bytes(name) >= min_bytes
            for name in names
        ):
            result.add(pointer)
    return result


def line_text(line) -> str:
    if isinstance(line, str):
        return line
    if isinstance(line, DeferredLineBase):
        return line.line
    return ""  # a LineContext


def _pointers_in(text: str) -> set[str]:
    return set(re.findall(r"\b(?:in_ptr|out_ptr|in_out_ptr)\d+\b", text))


def buffer_names(args, pointer: str) -> list[str]:
    """The graph buffers a kernel argument pointer stands for."""
    names = [n for n, p in args.input_buffers.items() if p == pointer]
    names += [n for n, p in args.output_buffers.items() if p == pointer]
    names += [
        n
        for n, b in args.inplace_buffers.items()
        if getattr(b, "inner_name", None) == pointer
    ]
    return names


def footprint_bytes(args) -> int:
    names = {*args.input_buffers, *args.output_buffers, *args.inplace_buffers}
    return sum(buffer_bytes(name) for name in names)


def cold_footprint_bytes(args) -> int:
    """``footprint_bytes`` less the inputs that are likely still in cache.

    An input that an earlier kernel of this graph wrote, and that fits in the
    last-level cache, is read from there (attention's scores, just written by
    the matmul): streaming the output then pushes to memory data that its
    consumer reads back, for a kernel that never left the cache.
    """
    cache = last_level_cache_bytes()
    hot = {
        name
        for name in args.input_buffers
        if name not in V.graph.graph_inputs
        and name not in V.graph.constants
        and buffer_bytes(name) < cache
    }
    names = {*args.input_buffers, *args.output_buffers, *args.inplace_buffers}
    return sum(buffer_bytes(name) for name in names - hot)


def _dtype(name: str):
    try:
        return V.graph.get_dtype(name)
    except KeyError:
        return None


def buffer_bytes(name: str) -> int:
    try:
        numel, dtype = V.graph.get_numel(name), V.graph.get_dtype(name)
    except KeyError:  # not a buffer of this graph: not counted
        return 0
    hint = V.graph.sizevars.optimization_hint(sympy.sympify(numel), fallback=1)
    return int(hint) * dtype.itemsize

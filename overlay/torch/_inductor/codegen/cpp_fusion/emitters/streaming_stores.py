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
  32 MiB; small outputs stay cached; the cache size and the fraction are the
  cost model's, costs.py);
- the kernel does not read that output back itself (directly or through an
  in-place alias).

``CppVecKernel.store`` (and ``store_reduction``, for a vertical reduction)
writes each full-vector float32 store through ``store_line``: a
``DeferredLine`` of the stored buffer that prints
``stream_store_f32(ptr, vec)`` instead of ``vec.store(ptr)`` if the kernel
group streams that buffer.  ``KernelGroup.codegen_group`` decides once the
group's kernels are generated and its footprint is known
(``plan_streaming``), from the group's arguments (footprint, sizes, dtypes)
and its nodes' ``read_writes`` (no node of the group reads the buffer,
in-place aliases and mutations resolved).  Each streamed store checks its
address at run time and falls back to a plain store when it is not aligned
to the vector width.  Streaming stores are weakly ordered: every thread
fences its own (``WorkSharing`` writes a ``stream_fence()`` line before it
closes each ``#pragma omp parallel`` block, printed only when the group
streams), and the kernel ends with one more fence for its serial loops.
Only x86 (AVX512, AVX2) has non-temporal stores; elsewhere nothing is
streamed and nothing fenced.  The store and the fence are helpers of
emitters/kernel_helpers.py (``_mm512_stream_ps`` / ``_mm256_stream_ps``,
``_mm_sfence``).  Measurements: docs/features/0013-streaming-stores.md.

Flag: ``config.cpp.streaming_stores`` (TORCHINDUCTOR_CPP_STREAMING_STORES).
"""

from __future__ import annotations

import dataclasses
import functools

import sympy
import torch
from torch._inductor import cpu_vec_isa
from torch._inductor.codegen.common import DeferredLine, is_buffer_removed
from torch._inductor.codegen.cpp_utils import cexpr_index
from torch._inductor.sizevars import stride_at_vec_range
from torch._inductor.utils import DeferredLineBase, IndentedBuffer
from torch._inductor.virtualized import V
from torch.utils._sympy.symbol import SymT, free_symbol_is_type

from .. import costs
from . import kernel_helpers as helpers
from .invariant_loads import memory_of_buffer

_FENCE = f"{helpers.STREAM_FENCE.name}();"


@dataclasses.dataclass(eq=False)
class _Store:
    """A full-vector float32 store that may stream."""

    name: str  # the buffer stored
    store: str  # the statement as the kernel prints it
    stream: str  # the same store, streamed
    streamed: bool = False


class StreamStoreLine(DeferredLine):
    """A store of a full float vector: ``vec.store(ptr)``, or
    ``stream_store_f32(ptr, vec)`` once the kernel group streams its buffer.
    Resolved when the kernel's text is produced (as upstream's
    ``DelayReplaceLine``); a plain ``DeferredLine`` of the buffer otherwise."""

    def __init__(self, name: str, line: str, store: _Store):
        if store.store not in line:
            # The kernel prints its stores otherwise than this module expects:
            # streaming them would silently do nothing while fences are still
            # emitted.
            raise AssertionError(f"no store {store.store!r} in the line {line!r}")
        super().__init__(name, line)
        self.store = store

    def __call__(self) -> str | None:
        line = super().__call__()
        if line is None or not self.store.streamed:
            return line
        return line.replace(self.store.store, self.store.stream)

    def _new_line(self, line: str) -> StreamStoreLine:
        return StreamStoreLine(self.name, line, self.store)


class FenceLine(DeferredLineBase):
    """``stream_fence();``, printed only if the kernel group streams."""

    def __init__(self, line: str, on: bool = False):
        super().__init__(line)
        self.on = on

    def __call__(self) -> str | None:
        return self.line if self.on else None

    def _new_line(self, line: str) -> FenceLine:
        return FenceLine(line, self.on)


def store_line(kernel, name: str, var: str, index: sympy.Expr, value, dtype):
    """How ``CppVecKernel.store`` wraps the lines of a plain store of
    ``value`` to ``name``: ``DeferredLine``, or ``StreamStoreLine`` for a full
    contiguous float32 vector (the one-line ``vec.store(ptr)`` form)."""
    plain = functools.partial(DeferredLine, name)
    tiling_var = kernel.itervars[kernel.tiling_idx]
    if (
        dtype != torch.float32
        or kernel.tail_size is not None
        or free_symbol_is_type(index, SymT.TMP)  # indirect: stored lane by lane
        or stride_at_vec_range(index, tiling_var, kernel.tiling_factor) != 1
        or not whole_vectors_alike(kernel, index, tiling_var)
    ):
        return plain
    address = f"{var} + {cexpr_index(index)}"
    store = _Store(
        name,
        store=f"{value}.store({address});",
        stream=f"{helpers.STREAM_STORE.name}({address}, {value});",
    )
    return lambda line: StreamStoreLine(name, line, store)


def whole_vectors_alike(kernel, index: sympy.Expr, tiling_var) -> bool:
    """Whether the store writes every vector of its buffer's rows in full and
    at one alignment: the tiled loop has no tail, and every other loop (and
    the constant offset) moves the address by whole vectors.

    Otherwise a tail kernel stores each row's end with plain stores, or the
    rows' starts shift against the vector width so that the helper's
    alignment check streams some rows and not others: streamed and plain
    stores then share cache lines, which costs more than streaming saves
    (docs/design-measurements.md#0013)."""
    sizevars = V.graph.sizevars
    factor = kernel.tiling_factor
    if not sizevars.statically_known_multiple_of(
        kernel.ranges[kernel.tiling_idx], factor
    ):
        return False
    others = [v for v in kernel.itervars if v != tiling_var and v in index.free_symbols]
    offset = index.subs(dict.fromkeys([tiling_var, *others], 0))
    steps = [sympy.expand(index.subs(v, v + 1) - index) for v in others]
    return all(
        step.is_Integer and sizevars.statically_known_multiple_of(step, factor)
        for step in [offset, *steps]
    )


def reduction_store_line(kernel, name, var, index, value, dtype):
    """``store_line`` for ``CppVecKernel.store_reduction``: a vertical
    reduction stores a vector (a horizontal one stores a scalar)."""
    if kernel.tiling_idx >= kernel.reduction_depth:
        return functools.partial(DeferredLine, name)
    return store_line(kernel, name, var, index, value, dtype)


def fence_parallel_region(code: IndentedBuffer) -> None:
    """Called by ``WorkSharing`` before it closes a ``#pragma omp parallel``
    block: each thread fences its own streaming stores before the region's
    closing barrier publishes them (the fence after the loops only covers
    the calling thread)."""
    code.writeline(FenceLine(_FENCE))


def plan_streaming(kernel_group) -> list[str]:
    """Decide which buffers of the kernel group stream; the lines that end
    the kernel (a fence) if any does.  The stores and fences are the
    group's own lines (``StreamStoreLine``, ``FenceLine``) in its loops."""
    args = kernel_group.args
    lines = kernel_group.loops_code.get_lines_ref()
    stores = [
        line.store
        for line in lines
        if isinstance(line, StreamStoreLine) and not is_buffer_removed(line.name)
    ]
    fences = [line for line in lines if isinstance(line, FenceLine)]
    for store in stores:
        store.streamed = False
    if not stores or not has_streaming_stores(cpu_vec_isa.pick_vec_isa()):
        return []
    if cold_footprint_bytes(args) < costs.last_level_cache_bytes():
        return []
    streamed = _streamable_buffers(kernel_group, {s.name for s in stores})
    if not streamed:
        return []
    for store in stores:
        store.streamed = store.name in streamed
    for fence in fences:
        fence.on = True
    helpers.use(args, helpers.STREAM_STORE)
    helpers.use(args, helpers.STREAM_FENCE)
    return [_FENCE]


def has_streaming_stores(isa) -> bool:
    """Whether the vector ISA has non-temporal vector stores (the helper's
    guarded intrinsics): x86's AVX512 and AVX2."""
    return isinstance(isa, (cpu_vec_isa.VecAVX512, cpu_vec_isa.VecAVX2))


def _streamable_buffers(kernel_group, stored: set[str]) -> set[str]:
    """The stored buffers that are large float32 outputs no node of the group
    reads."""
    args = kernel_group.args
    read = {
        memory_of_buffer(args, dep.name)
        for node in kernel_group.scheduled_nodes
        for dep in node.read_writes.reads
    }
    min_bytes = costs.stays_cached_below_bytes()
    result = set()
    for name in stored:
        if is_buffer_removed(name) or memory_of_buffer(args, name) in read:
            continue
        names = names_of_memory(args, name)
        if all(
            _dtype(n) == torch.float32 and buffer_bytes(n) >= min_bytes for n in names
        ):
            if not _allocated_fresh(names):
                result.add(name)
    return result


def _allocated_fresh(names: list[str]) -> bool:
    """Whether the memory of ``names`` comes from the allocator on every call
    as pages just mapped (``costs.allocator_maps_fresh_pages``): the wrapper
    allocates it, as it does every buffer but the graph's inputs and
    constants, which a mutation writes in place (under its own buffer name,
    resolved as ``memory_of_buffer`` does)."""
    real = V.graph.scheduler.mutation_real_name if V.graph.scheduler else {}
    callers = {*V.graph.graph_inputs, *V.graph.constants}
    if any(real.get(n, n) in callers for n in names):
        return False
    return costs.allocator_maps_fresh_pages(max(buffer_bytes(n) for n in names))


def names_of_memory(args, name: str) -> list[str]:
    """The graph buffers that share ``name``'s memory (an in-place pair)."""
    memory = memory_of_buffer(args, name)
    return [
        n
        for n in dict.fromkeys((name, *args.inplace_buffers))
        if memory_of_buffer(args, n) == memory
    ]


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
    cache = costs.last_level_cache_bytes()
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

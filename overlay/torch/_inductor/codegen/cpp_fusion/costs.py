"""The overlay's cost model for the C++ backend: cache sizes, thread counts,
and the row and block thresholds its fusion and codegen choices compare
against.

Every feature module reads its numbers here, so that one place says what
the overlay assumes of the machine.  This module is a leaf: it imports
nothing of the overlay (upstream modules only), and any feature module may
import it.

It also holds two lowering choices that pay off once rows are fused into one
outer loop.  With outer-loop fusion (``outer_loop/retile.py``)
the passes of a normalization run one row at a time, so a row read twice
comes from cache.  Two lowering heuristics of stock Inductor assume the
opposite, that every pass goes to memory, and pick compute over traffic:

- var/var_mean over more than 1024 elements lowers to Welford, one pass with
  a division per element (``lowering.use_two_step_variance``);
- a reused pointwise result is inlined into every consumer unless it uses one
  of a few heavy ops (``ir.StorageBox.should_realize_on_reuse``).

The hooks apply only while their flags are on:
``config.cpp.two_step_variance_in_cache`` and ``config.cpp.realize_reused_erf``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import sympy
from torch._inductor.utils import parallel_num_threads

# Rows up to this many elements (512 KiB of float32: half of a 1 MiB L2, the
# bound scheduling/block_fusion.py puts on a block) stay in L2 between the
# passes of an outer-loop fused normalization.  A diffusion UNet's
# GroupNorm(32, C) over 64x64 maps has groups of 40960 (C = 320) to 122880
# (C = 960) elements; fused, they read the map from memory once.
ROW_FITS_IN_CACHE = 131072
# Shorter rows keep stock's Welford lowering (and its kernel structure,
# which upstream's test_group_norm_vec pins for groups of 1080 elements).
ROW_WORTH_TWO_STEPS = 2048


# A buffer up to this size stays in a core's L2 cache while a loop walks it
# with a stride, so a loop reorder that strides the innermost loop over it
# (cpp_fusion.scheduling.loop_ordering.reorder_is_worthwhile) moves no extra memory.
STRIDED_ACCESS_STAYS_CACHED = 256 * 1024

# Bytes the consumer of an outer-block fusion may read in one outer
# iteration (scheduling/block_fusion.py): half of a 1 MiB L2, so the block the
# producer's passes left is still there.
BLOCK_BYTES_IN_CACHE = 512 * 1024

# Bytes the consumer of an outer-block fusion over tiles of the innermost
# loop (scheduling/block_tiles.py) reads per tile: a core's L1 data cache, so
# the tile the producer wrote is read back from L1.
TILE_BYTES_IN_CACHE = 32 * 1024
# Tiles are whole vectors of the widest registers any supported ISA has
# (AVX512's 64 bytes: 16 float32 lanes, 64 int8 lanes), so no tile has a
# vector tail.
WIDEST_VECTOR_BYTES = 64


# ...and span at least this many bytes of each row: the tiled kernels walk
# down the rows of a tile, and a tile of one or two cache lines a row turns
# stock's contiguous row walks into strided ones (softmax over dim 0 of a
# 4 KiB-wide matrix, whose budget allows tiles of 16 floats, ran slower so).
TILE_MIN_ROW_BYTES = 256


def tile_lanes(itemsize: int) -> int:
    """Elements a tile is a multiple of, for the narrowest dtype it moves."""
    return WIDEST_VECTOR_BYTES // itemsize


def min_tile(itemsize: int) -> int:
    """The fewest elements a tile may have, for the narrowest dtype it moves."""
    return TILE_MIN_ROW_BYTES // itemsize

# The last-level cache when sysfs does not say.
_FALLBACK_LLC_BYTES = 32 << 20
# Overrides the cache size read from sysfs (to exercise streaming stores and
# prefetches on small programs, as the fuzzer's streaming run does, or where
# sysfs is wrong).
CACHE_BYTES_ENV = "TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES"
# A buffer smaller than this fraction of the last-level cache (1 MiB of
# 32 MiB) stays in cache for its consumer whatever the kernel does: its
# stores do not stream (0013) and its rows are not prefetched (0014).
MIN_STREAMED_FRACTION = 32
# How far ahead the last pass of an outer-loop fused kernel prefetches the
# next rows (0014), rounded up to whole outer iterations.
LOOKAHEAD_BYTES = 16 << 10
# Rows (one outer iteration of a prefetched buffer) of at most a page are
# prefetched only where the hardware prefetcher stops at each page (Intel's
# cores): on AMD's, the prefetches of the next LayerNorm rows of 4 KiB made
# the kernel slower, while groups and rows longer than a page still gained
# (docs/design-measurements.md#0014).
PAGE_BYTES = 4096
# "1" or "0" overrides the vendor's answer
SHORT_ROW_PREFETCH_ENV = "TORCHINDUCTOR_CPP_PREFETCH_SHORT_ROWS"


@functools.cache
def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache level: $TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES,
    else sysfs, else 32 MiB."""
    override = os.environ.get(CACHE_BYTES_ENV, "")
    if override.isdigit():
        return int(override)
    sizes = [size for _, _, size in _sysfs_caches()]
    return max(sizes, default=_FALLBACK_LLC_BYTES)


@functools.cache
def instruction_cache_bytes() -> int:
    """Size of the first-level instruction cache: sysfs, else 32 KiB."""
    sizes = [
        size
        for level, kind, size in _sysfs_caches()
        if level == 1 and kind == "Instruction"
    ]
    return min(sizes, default=_FALLBACK_L1I_BYTES)


def _sysfs_caches() -> list[tuple[int, str, int]]:
    """``(level, type, bytes)`` of each cache of cpu0 that sysfs lists."""
    caches = []
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
        except OSError:
            continue
        if text and text[-1] in units and text[:-1].isdigit():
            size = int(text[:-1]) * units[text[-1]]
        elif text.isdigit():
            size = int(text)
        else:
            continue
        caches.append((int(level) if level.isdigit() else 0, kind, size))
    return caches


# The first-level instruction cache when sysfs does not say.
_FALLBACK_L1I_BYTES = 32 << 10
# Machine code one loop-body op compiles to in a C++ kernel, its vector loop
# and its tail together (read off one compiled fused nest: the design
# measurements of 0002).
CODE_BYTES_PER_OP = 16
# A fused outer loop whose body is larger than the instruction cache fetches
# its code again on every outer iteration, and each kernel's code runs for
# its few vector iterations in between: each kernel must run at least this
# many of them per outer iteration for the fetches to cost little
# (docs/design-measurements.md, 0002, "Code that leaves the instruction
# cache").
MIN_VECTOR_ITERATIONS_PER_FETCH = 8


def refetches_code(ops: int, vector_iterations: float) -> bool:
    """Whether a fused outer loop spends its time fetching its code: its
    body's ``ops`` overflow the instruction cache, and its kernels run
    ``vector_iterations`` vector iterations each per outer iteration, on
    average, between two fetches of their code."""
    overflows = ops * CODE_BYTES_PER_OP > instruction_cache_bytes()
    return overflows and vector_iterations < MIN_VECTOR_ITERATIONS_PER_FETCH


def prefetches_short_rows() -> bool:
    """Whether 0014 prefetches rows of at most ``PAGE_BYTES``: the
    override in $TORCHINDUCTOR_CPP_PREFETCH_SHORT_ROWS, else every CPU but
    AMD's."""
    override = os.environ.get(SHORT_ROW_PREFETCH_ENV, "")
    if override in ("0", "1"):
        return override == "1"
    return cpu_vendor() != "AuthenticAMD"


@functools.cache
def cpu_vendor() -> str:
    """The ``vendor_id`` of /proc/cpuinfo, or "" where it does not say."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return ""


# "1" or "0" overrides the allocator probe's answer for every buffer size
FRESH_PAGES_ENV = "TORCHINDUCTOR_CPP_FRESH_PAGES"
# Probes round a buffer's size down to this unit, and ask once per size.
_PROBE_UNIT_BYTES = 1 << 20
# Allocations the probe makes and frees before those it checks: glibc moves
# its mmap threshold and heap top as blocks are freed, and reaches what every
# later call gets only after a few rounds; the checked rounds must all fault.
_PROBE_WARM_ROUNDS = 8
_PROBE_CHECKED_ROUNDS = 4


def allocator_maps_fresh_pages(nbytes: int) -> bool:
    """Whether a buffer of ``nbytes`` that the compiled code allocates on
    every call gets pages the kernel has just mapped: the allocator returned
    the last call's block to the kernel (glibc's default malloc from 32 MiB
    on, jemalloc's defaults from 8 MiB).  The first store to each such page
    faults, and the operating system zeroes the page before the compiled
    code's store writes it: streaming stores into such pages do not pay
    (0013's feature page).
    $TORCHINDUCTOR_CPP_FRESH_PAGES overrides the probe."""
    override = os.environ.get(FRESH_PAGES_ENV, "")
    if override in ("0", "1"):
        return override == "1"
    return _probe_fresh_pages(max(nbytes // _PROBE_UNIT_BYTES, 1) * _PROBE_UNIT_BYTES)


@functools.cache
def _probe_fresh_pages(nbytes: int) -> bool:
    """Allocate ``nbytes`` through torch's CPU allocator, as the compiled code's
    wrapper does, touch a page and free it, a few times; then whether the
    same touch faults in each of the next allocations."""
    import resource

    import torch

    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    faults = []
    for _ in range(_PROBE_WARM_ROUNDS + _PROBE_CHECKED_ROUNDS):
        block = torch.empty(nbytes, dtype=torch.uint8)
        before = resource.getrusage(who).ru_minflt
        block[nbytes // 2] = 1
        faults.append(resource.getrusage(who).ru_minflt > before)
        del block
    return all(faults[_PROBE_WARM_ROUNDS:])


def stays_cached_below_bytes() -> int:
    """Buffers smaller than this stay in the last-level cache for their
    consumers (``MIN_STREAMED_FRACTION`` of it)."""
    return last_level_cache_bytes() // MIN_STREAMED_FRACTION


# Below this many bytes in its largest tensor a graph's loops are a few
# vectors long: what a fusion or a prefetch saves there (a loop's overhead,
# no memory traffic) is lost in the call, and the speculative analyses give
# stock's answer (speculation.py; where the fusions start to pay:
# docs/design-measurements.md, "The speculation bound").
SPECULATION_MIN_TENSOR_BYTES = 2 * 1024
# Overrides it; 0 speculates on every graph.
SPECULATION_MIN_BYTES_ENV = "TORCHINDUCTOR_CPP_SPECULATION_MIN_BYTES"


# Vector lanes of the widest float ISA we target; scalar work that replaces
# vector work costs roughly this much more per element.
VECTOR_LANES = 16
# Stock's threshold for outer-loop fusion: an inner loop this many times
# longer than the outer loops is better parallelized by itself.
INNER_TO_OUTER = 300
# Below this many iterations per kernel, a parallel inner loop costs more
# in synchronization than it gains.
SMALL_KERNEL_ITERATIONS = 65536
# More iterations than this many per thread balance well enough whatever
# the remainder.
BALANCED_ITERATIONS_PER_THREAD = 8
# A large node is fused over rows that stay in cache only when every
# thread gets at least this many rows.
ROWS_PER_THREAD = 8


def feeds_every_thread(outer: int) -> bool:
    """Whether a parallel loop of ``outer`` iterations leaves no thread idle."""
    return outer >= parallel_num_threads()


def balances_over_threads(outer: int) -> bool:
    """Whether a parallel loop of ``outer`` iterations gives every thread an
    equal share, or enough iterations that the remainder does not matter."""
    threads = parallel_num_threads()
    return outer >= threads and (
        outer % threads == 0 or outer >= threads * BALANCED_ITERATIONS_PER_THREAD
    )


def rows_feed_every_thread(rows: int, row_numel: int) -> bool:
    """Whether a fused loop over ``rows`` rows beats parallel inner loops.

    Every thread gets ROWS_PER_THREAD rows or more, and a row stays in
    cache between the passes over it.  (With fewer rows, a large node
    keeps stock's parallel inner loops: upstream's
    test_group_norm_large_input, 4 groups of 32768, expects that.)
    """
    threads = parallel_num_threads()
    return rows >= threads * ROWS_PER_THREAD and row_stays_cached(row_numel)


# A row longer than ROW_FITS_IN_CACHE is still cached for the next pass over
# it when the rows all threads work on take at most this fraction of the
# last-level cache (the rest holds what the passes stream in and out).
ROW_SHARE_OF_LAST_LEVEL = 4


def row_stays_cached(row_numel: int) -> bool:
    """Whether a float32 row read by one pass of a fused normalization is
    still cached when the next pass over it starts.

    Up to ROW_FITS_IN_CACHE elements it stays in L2.  A longer row stays in
    the last-level cache while every thread's row together take at most
    1/ROW_SHARE_OF_LAST_LEVEL of it: LayerNorm over (128, 56, 56) (rows of
    1.5 MiB) then reads its input from memory once, as ATen's kernel does,
    where unfused it reads it twice.  Many threads over one cache give
    shorter bounds, down to L2's.
    """
    if row_numel <= ROW_FITS_IN_CACHE:
        return True
    rows_bytes = row_numel * 4 * parallel_num_threads()
    return rows_bytes * ROW_SHARE_OF_LAST_LEVEL <= last_level_cache_bytes()


# A split of a consumer's loops that changes its innermost (vectorized)
# extent is only taken when the consumer is this many times smaller than its
# producer (outer_loop/split.py): it may then lose vector efficiency, but
# on a negligible share of the work.
SMALL_CONSUMER_RATIO = 16

# Accumulators of a long horizontal reduction (0008): each iteration waits
# for the add of the iteration this many before it, not the one before.
ACCUMULATORS = 4
# Fewer vector iterations per row and accumulator than this keep one
# accumulator: the final combine would cost more than it saves.
MIN_ITERATIONS_PER_ACCUMULATOR = 8


def strided_inner_bytes(node, count_cached: bool = True) -> int:
    """Bytes of the node's accesses that are strided along its innermost loop.

    The C++ backend vectorizes the innermost loop; an access whose stride
    there is neither 0 nor 1 becomes a gather or scatter, or walks rows
    across pages.  Without ``count_cached``, accesses to a buffer small
    enough to stay in cache (``STRIDED_ACCESS_STAYS_CACHED``), which move no
    extra memory, are not counted.
    """
    return sum(size for _, size in strided_inner_deps(node, count_cached))


def strided_inner_deps(node, count_cached: bool = True) -> list:
    """``(dep, bytes)`` of the accesses ``strided_inner_bytes`` counts."""
    from torch._inductor.dependencies import MemoryDep
    from torch._inductor.virtualized import V

    strided = []
    for dep in node.read_writes.reads_and_writes():
        if not isinstance(dep, MemoryDep) or not dep.var_names:
            continue
        inner = dep.var_names[-1]
        stride = V.graph.sizevars.stride_hints(dep.index, [inner])[0]
        size = node.scheduler.dep_size_hint(dep)
        cached = size <= STRIDED_ACCESS_STAYS_CACHED
        if stride not in (0, 1) and (count_cached or not cached):
            strided.append((dep, size))
    return strided


def two_step_variance_threshold(
    stock_threshold: int, reduction_numel, outer_numel
) -> int:
    """Largest reduction that lowers var/var_mean as sum + sum of squares.

    Stock keeps Welford for reductions over 1024 elements because the two-step
    form reads the data twice.  Once the passes share one outer loop, the
    second pass reads the row from cache, and Welford's per element division
    costs more than the second read.  Two-step (mean first, then squared
    deviations) is as stable as Welford.

    Rows of at least ROW_WORTH_TWO_STEPS elements that stay cached between
    the passes (``row_stays_cached``) switch,
    but only where the outer-loop fusion will be accepted: its parallelism
    guard refuses rows more than INNER_TO_OUTER times longer than the number
    of rows unless every thread gets several rows
    (``rows_feed_every_thread``), and unfused the two steps
    would read the data from memory twice.
    Rows of 2048 and more pay too; rows of 1025 to 2047 keep Welford (not
    measured).  The measurements: docs/design-measurements.md, 0004.
    """
    numel = _static_int(reduction_numel)
    rows = _static_int(outer_numel)
    fusable = rows * INNER_TO_OUTER >= numel or rows_feed_every_thread(rows, numel)
    if ROW_WORTH_TWO_STEPS <= numel and row_stays_cached(numel) and fusable:
        return max(stock_threshold, numel)
    return stock_threshold


def _static_int(expr) -> int:
    return int(expr) if isinstance(expr, (int, sympy.Integer)) else 0


# LoopBody ops whose cost per element dwarfs a load's or an add's latency:
# a pass that computes one is bound by its math, not by memory (0014 does not
# prefetch for it), and a reduction over it gains nothing from more
# accumulators (0008).
TRANSCENDENTAL_OPS = frozenset(
    (
        *("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "log_ndtr"),
        *("erf", "erfc", "erfcx", "erfinv", "tanh", "sigmoid", "pow"),
        *("sin", "sinh", "cos", "cosh", "tan", "atan", "atan2", "atanh"),
    )
)


# Ops that cost more to recompute per consumer than to store and reload
# once, beyond the ones stock already lists (exp, log, sigmoid, tanh...):
# GELU's erf, recomputed by each of LayerNorm's passes, costs more than a
# store and a reload (docs/design-measurements.md, 0007).
EXPENSIVE_TO_RECOMPUTE = frozenset({"erf", "erfc", "erfinv", "expm1"})


def expensive_to_recompute(used_ops) -> bool:
    """Whether a reused CPU pointwise result should be realized, not inlined.

    Outer-loop fusion keeps the realized row in cache for its consumers, so
    the store and reload cost little, while inlining repeats the op in every
    consumer loop.
    """
    return not EXPENSIVE_TO_RECOMPUTE.isdisjoint(used_ops)


# GroupNorm over channels-last memory (0022): pixels per block of the first
# level of per-channel sums.  Its kernel walks a block's rows once per
# channel vector, so a block (16 pixels by the channels of a diffusion
# UNet's GroupNorms, 320 to 1280) stays in L1 or L2.
GROUP_NORM_PIXEL_BLOCK = 16
# A smaller block leaves a buffer of partial sums a quarter of the input
# or larger: the core decomposition is kept.
GROUP_NORM_MIN_PIXEL_BLOCK = 4
# The per-channel form makes four loop nests where the core decomposition
# makes two: two more parallel regions and passes over small buffers, a
# fixed cost that only the masked group slices it saves on larger inputs
# pay back.  Below this many bytes of input the core form is kept (the
# measured crossing lies between 180 and 256 KiB: docs/features/0022-*.md).
GROUP_NORM_CHANNEL_SUMS_MIN_BYTES = 192 * 1024


# Reductions over an outer or middle dim (0023): rows per block of the first
# level.  A block of 16 rows of a few thousand bytes stays in L1 while the
# kernel walks every vector of the row down it, and the partial results
# are 1/16 of the input.
OUTER_REDUCTION_BLOCK_ROWS = 16
# The output's contiguous dim must hold at least a vector of float32 on
# AVX512 for the backend to walk it with full vectors.
OUTER_REDUCTION_MIN_ROW = 16
# The column walk re-reads one slab (the reduced rows under one outer
# index, rows times the row stride) once per vector of the row.  A smaller
# slab is re-read from L1 or streamed from L2 at a stride the prefetcher
# follows: the split would only add a level (docs/features/0023-*.md).  Also a bound
# on the whole input, checked first, before the reads are analysed.
OUTER_REDUCTION_MIN_BYTES = 128 * 1024
# A reduction chained to another (a softmax's sum of exps after its max, a
# LayerNorm's variance after its mean) splits only over an input that fits
# in this fraction of the last-level cache: the second reduction re-reads
# the input after all of the first one's blocks, from the cache if it fits.
OUTER_REDUCTION_CHAIN_FRACTION = 2
# ...and only where its rows lie at least this many bytes apart.  A column
# walk whose rows are closer (a softmax over the channels of a 7x7 or 14x14
# map: 196 or 784 bytes) stays within a page for several rows, a stride the
# hardware prefetcher follows; the blocks then gain nothing on the walk and
# cost the chain its fused second walk from L1 (the second reduction re-reads
# the input after all of the first one's blocks, one more pass).  From 2 KiB
# a walk enters a new page at least every other row.
OUTER_REDUCTION_CHAIN_MIN_ROW_STRIDE_BYTES = 2048

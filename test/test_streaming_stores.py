"""Streaming stores for outputs that cannot stay in cache (cpp.streaming_stores).

cpp_fusion/emitters/streaming_stores.py turns the full-vector float32 stores
of a kernel's output into non-temporal stores when the kernel touches more memory than
the last-level cache; every thread fences its own. The tests shrink the cache
size the module assumes, so small programs exercise it, and check agreement
with eager, which stores are streamed, and the guards.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import types

import pytest
import sympy
import torch
import torch._inductor.codegen.cpp_fusion.emitters.streaming_stores as streaming
import torch._inductor.codegen.cpp_fusion.costs as costs
from compile_utils import compile_shipped_and_inspect, requires_vectors, vector_lanes
from torch._inductor.codegen.common import InplacedBuffer, KernelArgs
from torch._inductor.utils import IndentedBuffer
from torch._inductor.virtualized import V
from torch.testing import FileCheck

STREAMED = "stream_store_f32(out_ptr"
ONE_THREAD = {"cpp.threads": 1}
STREAMING_OFF = {**ONE_THREAD, "cpp.streaming_stores": False}


@pytest.fixture
def cache_of(monkeypatch):
    def set_size(nbytes: int) -> None:
        monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: nbytes)

    return set_size


def layernorm(cols: int, dtype=torch.float32):
    ln = torch.nn.LayerNorm(cols).to(dtype)
    return ln, (torch.randn(512, cols, dtype=dtype),)


@requires_vectors
def test_output_of_a_kernel_larger_than_the_cache_is_streamed(cache_of):
    cache_of(1 << 20)  # LayerNorm (512, 1024) reads and writes 4 MiB
    fn, args = layernorm(1024)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    off = compile_shipped_and_inspect(fn, args, extra_config=STREAMING_OFF)
    assert on.code.count(STREAMED) == 1 and STREAMED not in off.code
    assert "stream_fence();" in on.code
    assert on.nests == off.nests == [1]


@requires_vectors
def test_stream_intrinsics_sit_under_their_isa_guards(cache_of):
    # the kernel calls helpers; the x86 intrinsics are only compiled where
    # the build's ISA macro says the CPU has them (MSVC included), and other
    # ISAs get a plain store and no fence
    cache_of(1 << 20)
    fn, args = layernorm(1024)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    FileCheck().check("inline void stream_store_f32(").check(
        "#if defined(CPU_CAPABILITY_AVX512)"
    ).check("_mm512_stream_ps(ptr, vec);").check(
        "#elif defined(CPU_CAPABILITY_AVX2)"
    ).check("_mm256_stream_ps(ptr, vec);").check("#endif").check_next(
        "vec.store(ptr);"
    ).check("inline void stream_fence()").check_next(
        "#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)"
    ).check_next("_mm_sfence();").check_next("#endif").check(
        "stream_store_f32(out_ptr"
    ).run(on.code)
    for intrinsic in ("_mm512_stream_ps", "_mm256_stream_ps", "_mm_sfence"):
        FileCheck().check_count(intrinsic, 1, exactly=True).run(on.code)


@requires_vectors  # without vectors nothing streams anywhere
def test_kernel_within_the_cache_is_unchanged(cache_of):
    cache_of(64 << 20)
    fn, args = layernorm(1024)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    off = compile_shipped_and_inspect(fn, args, extra_config=STREAMING_OFF)
    assert on.kernels == off.kernels


@requires_vectors
def test_each_thread_fences_its_streaming_stores(cache_of):
    cache_of(1 << 20)
    fn, args = layernorm(1024)
    on = compile_shipped_and_inspect(fn, args, extra_config={"cpp.threads": 2})
    assert on.code.count(STREAMED) == 1 and on.nests == [1]
    # one fence at the end of the parallel region, before its closing
    # barrier, run by every thread; one after it
    region = on.code[on.code.index("#pragma omp parallel") :]
    region = region[: region.index("\n    }\n")]
    assert region.count("stream_fence();") == 1
    assert region.rstrip().endswith("stream_fence();")
    assert on.code.count("stream_fence();") == 2


@requires_vectors
def test_rows_with_a_tail_and_bfloat16_outputs_store_as_before(cache_of):
    cache_of(1 << 20)
    # 62 full vectors and a masked tail per row (1000 columns on AVX512): the
    # tail's plain stores and the rows' shifting alignment would share cache
    # lines with streamed ones, so nothing of the row streams
    fn, args = layernorm(62 * vector_lanes() + vector_lanes() // 2)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    off = compile_shipped_and_inspect(fn, args, extra_config=STREAMING_OFF)
    assert STREAMED not in on.code and "stream_fence();" not in on.code
    assert on.kernels == off.kernels
    fn, args = layernorm(1024, torch.bfloat16)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    assert STREAMED not in on.code


@requires_vectors  # simdlen 1 must turn streaming off where it would act
def test_scalar_kernels_store_as_before(cache_of):
    # no vector ISA (simdlen 1): no vector stores to stream, no fences
    cache_of(1 << 20)
    fn, args = layernorm(1024)
    scalar = {**ONE_THREAD, "cpp.simdlen": 1}
    on = compile_shipped_and_inspect(fn, args, extra_config=scalar)
    off = compile_shipped_and_inspect(
        fn, args, extra_config={**scalar, "cpp.streaming_stores": False}
    )
    assert "Vectorized" not in on.code
    assert on.kernels == off.kernels


@pytest.fixture
def large_float_buffers(monkeypatch):
    monkeypatch.setattr(streaming, "buffer_bytes", lambda name: 64 << 20)
    monkeypatch.setattr(streaming, "_dtype", lambda name: torch.float32)
    monkeypatch.setenv(costs.FRESH_PAGES_ENV, "0")  # whatever this allocator does


@contextlib.contextmanager
def _no_graph():
    """A graph handler without a scheduler, for kernel groups built by hand."""
    graph = types.SimpleNamespace(
        scheduler=None,
        removed_buffers=set(),
        inplaced_to_remove=set(),
        graph_inputs={"arg0_1": None},
        constants={},
    )
    with V.set_graph_handler(graph):
        yield


def _group(*nodes_reads: set[str]):
    """A kernel group whose nodes read the given buffers."""
    nodes = [
        types.SimpleNamespace(
            read_writes=types.SimpleNamespace(
                reads=[types.SimpleNamespace(name=n) for n in reads]
            )
        )
        for reads in nodes_reads
    ]
    return types.SimpleNamespace(args=KernelArgs(), scheduled_nodes=nodes)


def test_cache_size_can_be_set(monkeypatch):
    monkeypatch.setenv(costs.CACHE_BYTES_ENV, "65536")
    costs.last_level_cache_bytes.cache_clear()
    try:
        assert costs.last_level_cache_bytes() == 65536
    finally:
        costs.last_level_cache_bytes.cache_clear()


def test_output_the_kernel_reads_back_is_not_streamed(large_float_buffers):
    with _no_graph():
        assert streaming._streamable_buffers(_group({"arg0_1"}), {"buf0"}) == {"buf0"}
        read_back = _group({"arg0_1"}, {"buf0"})
        assert streaming._streamable_buffers(read_back, {"buf0"}) == set()


def test_output_read_through_an_in_place_alias_is_not_streamed(large_float_buffers):
    with _no_graph():
        # buf1 reuses buf0's memory (in_out_ptr0): a read of buf0 reads buf1
        group = _group({"buf0"})
        group.args.inplace_buffers["buf0"] = group.args.inplace_buffers["buf1"] = (
            InplacedBuffer("in_out_ptr0", ["buf0", "buf1"])
        )
        assert streaming._streamable_buffers(group, {"buf1"}) == set()


def test_small_output_is_not_streamed(large_float_buffers, monkeypatch, cache_of):
    with _no_graph():
        cache_of(32 << 20)  # outputs under 1 MiB stay in cache
        monkeypatch.setattr(streaming, "buffer_bytes", lambda name: 64 << 10)
        assert streaming._streamable_buffers(_group(set()), {"buf0"}) == set()


@requires_vectors
def test_output_in_pages_mapped_afresh_is_not_streamed(cache_of, monkeypatch):
    # an allocator that returns each call's output to the kernel: the pages
    # fault in on the first store, and a streaming store does not pay there
    cache_of(1 << 20)
    fn, args = layernorm(1024)
    monkeypatch.setenv(costs.FRESH_PAGES_ENV, "1")
    fresh = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    monkeypatch.setenv(costs.FRESH_PAGES_ENV, "0")
    kept = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    assert STREAMED not in fresh.code and "stream_fence();" not in fresh.code
    assert kept.code.count(STREAMED) == 1
    assert fresh.nests == kept.nests == [1]


def test_a_graph_input_written_in_place_streams_in_any_allocator(
    large_float_buffers, monkeypatch
):
    monkeypatch.setenv(costs.FRESH_PAGES_ENV, "1")
    with _no_graph():
        # arg0_1 is the caller's memory, mutated in place: not allocated per call
        assert streaming._streamable_buffers(_group(set()), {"arg0_1"}) == {"arg0_1"}
        assert streaming._streamable_buffers(_group(set()), {"buf0"}) == set()


# glibc's tunables of the benches (tools/bench.py): freed memory stays in the heap
KEEP_FREED_MEMORY = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"
_PROBE = """
from torch._inductor.codegen.cpp_fusion import costs
print(*(costs.allocator_maps_fresh_pages(mib << 20) for mib in (64, 1)))
"""


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the probe's expectations are glibc's malloc",
)
@pytest.mark.parametrize(
    "tunables, expected",
    [
        # glibc maps blocks of 32 MiB and more afresh on every allocation
        ("", "True False"),
        # the benches' tunables keep freed memory in the heap
        (KEEP_FREED_MEMORY, "False False"),
    ],
)
def test_the_allocator_probe_sees_which_blocks_come_back_mapped_afresh(
    tunables, expected
):
    unset = ("GLIBC_TUNABLES", "LD_PRELOAD", costs.FRESH_PAGES_ENV)
    env = {k: v for k, v in os.environ.items() if k not in unset}
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    command = [sys.executable, "-c", _PROBE]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == expected.split()


def test_the_allocator_probe_can_be_overridden(monkeypatch):
    for value in ("0", "1"):
        monkeypatch.setenv(costs.FRESH_PAGES_ENV, value)
        assert costs.allocator_maps_fresh_pages(64 << 20) is (value == "1")


def test_a_store_line_streams_only_once_planned():
    store = streaming._Store(
        "buf0",
        store="tmp3.store(out_ptr0 + static_cast<int64_t>(x0));",
        stream="stream_store_f32(out_ptr0 + static_cast<int64_t>(x0), tmp3);",
    )
    buffer = IndentedBuffer()
    with buffer.indent():
        buffer.writeline(streaming.StreamStoreLine("buf0", store.store, store))
    graph = types.SimpleNamespace(removed_buffers=set(), inplaced_to_remove=set())
    with V.set_graph_handler(graph):
        assert buffer.getvalue() == "    " + store.store + "\n"
        store.streamed = True
        assert buffer.getvalue() == "    " + store.stream + "\n"


def test_only_whole_vectors_at_one_alignment_stream():
    from torch._inductor.sizevars import SizeVarAllocator

    x0, x1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)
    rows = types.SimpleNamespace(
        tiling_factor=8, tiling_idx=1, itervars=[x0, x1], ranges=[32, 200]
    )
    alike = streaming.whole_vectors_alike
    with V.set_graph_handler(types.SimpleNamespace(sizevars=SizeVarAllocator())):
        assert alike(rows, x1 + 200 * x0, x1)
        assert alike(rows, x1 + 400 * x0 + 8, x1)  # every other row, aligned
        assert not alike(rows, x1 + 196 * x0, x1)  # rows start 4 floats apart
        assert not alike(rows, x1 + 200 * x0 + 4, x1)  # a shifted slice
        tail = types.SimpleNamespace(**{**vars(rows), "ranges": [32, 196]})
        assert not alike(tail, x1 + 196 * x0, x1)  # each row ends in a tail


def test_isas_without_non_temporal_stores_do_not_stream():
    from torch._inductor import cpu_vec_isa

    assert streaming.has_streaming_stores(cpu_vec_isa.VecAVX2())
    assert streaming.has_streaming_stores(cpu_vec_isa.VecAVX512())
    assert not streaming.has_streaming_stores(cpu_vec_isa.VecNEON())
    assert not streaming.has_streaming_stores(cpu_vec_isa.VecSVE())
    assert not streaming.has_streaming_stores(cpu_vec_isa.invalid_vec_isa)


def test_a_store_printed_otherwise_fails_loudly():
    # streaming swaps the store the kernel prints for the helper call; if the
    # kernel printed it otherwise, streaming would silently do nothing while
    # its fences are still written
    store = streaming._Store(
        "buf0",
        store="tmp0.store(out_ptr0 + x0);",
        stream="stream_store_f32(out_ptr0 + x0, tmp0);",
    )
    line = streaming.StreamStoreLine("buf0", "tmp0.store(out_ptr0 + x0);", store)
    store.streamed = True
    with _no_graph():
        assert line() == "stream_store_f32(out_ptr0 + x0, tmp0);"
    with pytest.raises(AssertionError, match="no store"):
        streaming.StreamStoreLine("buf0", "store(tmp0, out_ptr0 + x0);", store)

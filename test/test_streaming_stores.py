"""Streaming stores for outputs that cannot stay in cache (cpp.streaming_stores).

cpp_streaming_stores.py turns the full-vector float32 stores of a kernel's
output into non-temporal stores when the kernel touches more memory than
the last-level cache; every thread fences its own. The tests shrink the cache
size the module assumes, so small programs exercise it, and check agreement
with eager, which stores are streamed, and the guards.
"""

from __future__ import annotations

import pytest
import torch
import torch._inductor.codegen.cpp_streaming_stores as streaming
from compile_utils import compile_shipped_and_inspect, requires_vectors, vector_lanes
from torch._inductor.codegen.common import KernelArgs
from torch._inductor.utils import IndentedBuffer

STREAMED = "stream_store_f32(out_ptr"
ONE_THREAD = {"cpp.threads": 1}
STREAMING_OFF = {**ONE_THREAD, "cpp.streaming_stores": False}


@pytest.fixture
def cache_of(monkeypatch):
    def set_size(nbytes: int) -> None:
        monkeypatch.setattr(streaming, "last_level_cache_bytes", lambda: nbytes)

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


def test_parallel_region_without_braces_is_not_streamed():
    loop = _lines("#pragma omp parallel for", "for(int64_t x0=0; x0<8; ++x0)", "{", "}")
    assert streaming._fence_parallel_regions(loop) is None
    region = _lines("#pragma omp parallel", "{", "int tid = 0;", "}")
    fenced = streaming._fence_parallel_regions(region)
    assert [streaming.line_text(line) for line in fenced] == [
        "#pragma omp parallel",
        "{",
        "int tid = 0;",
        "    stream_fence();",
        "}",
    ]


@requires_vectors
def test_tail_stores_and_bfloat16_outputs_store_as_before(cache_of):
    cache_of(1 << 20)
    # 62 full vectors and a masked tail per row (1000 columns on AVX512)
    fn, args = layernorm(62 * vector_lanes() + vector_lanes() // 2)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    assert on.code.count(STREAMED) == 1
    assert ".store(out_ptr" in on.code  # the tail, with its element count
    fn, args = layernorm(1024, torch.bfloat16)
    on = compile_shipped_and_inspect(fn, args, extra_config=ONE_THREAD)
    assert STREAMED not in on.code


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

def _lines(*texts: str) -> list[str]:
    buffer = IndentedBuffer()
    buffer.writelines(texts)
    return buffer._lines


@pytest.fixture
def large_float_buffers(monkeypatch):
    monkeypatch.setattr(streaming, "buffer_bytes", lambda name: 64 << 20)
    monkeypatch.setattr(streaming, "_dtype", lambda name: torch.float32)
    args = KernelArgs()
    args.output_buffers["buf0"] = "out_ptr0"
    return args


STORE = "tmp3.store(out_ptr0 + static_cast<int64_t>(x1 + 64L*x0));"


def test_cache_size_can_be_set(monkeypatch):
    monkeypatch.setenv(streaming.CACHE_BYTES_ENV, "65536")
    streaming.last_level_cache_bytes.cache_clear()
    try:
        assert streaming.last_level_cache_bytes() == 65536
    finally:
        streaming.last_level_cache_bytes.cache_clear()


def test_output_the_kernel_reads_back_is_not_streamed(large_float_buffers):
    args = large_float_buffers
    assert streaming._streamable_pointers(args, _lines(STORE)) == {"out_ptr0"}
    read_back = "auto tmp5 = at::vec::Vectorized<float>::loadu(out_ptr0 + x0, 16);"
    assert streaming._streamable_pointers(args, _lines(STORE, read_back)) == set()


def test_small_output_is_not_streamed(large_float_buffers, monkeypatch, cache_of):
    cache_of(32 << 20)  # outputs under 1 MiB stay in cache
    monkeypatch.setattr(streaming, "buffer_bytes", lambda name: 64 << 10)
    assert streaming._streamable_pointers(large_float_buffers, _lines(STORE)) == set()

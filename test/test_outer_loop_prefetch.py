"""Prefetching the next rows in the last pass (cpp.outer_loop_prefetch).

In an outer-loop fused kernel that reads a row in several passes, the last
pass prefetches the rows the next outer iterations' first pass will read.
The tests shrink the cache size the kernel must exceed (the one streaming
stores use), and check agreement with eager, where the prefetches go, how
far ahead they reach, and the guards.
"""

from __future__ import annotations

import re

import pytest
import sympy
import torch
import torch.nn.functional as F
import torch._inductor.codegen.cpp_fusion.costs as costs
from compile_utils import (
    LOOP_ORDERING_OFF,
    compile_shipped_and_inspect,
    requires_vectors,
    vector_lanes,
)
from torch._inductor.codegen.cpp_fusion.emitters.prefetch import static_stride
from torch.testing import FileCheck
from torch.utils._sympy.functions import ModularIndexing

PREFETCH_OFF = {"cpp.outer_loop_prefetch": False}
PREFETCH = re.compile(
    r"prefetch_ahead\(((?:in_ptr|in_out_ptr)\d+) \+ "
    r"static_cast<int64_t>\((.*)\), (\d+)\);"
)


@pytest.fixture
def cache_of(monkeypatch):
    # rows of a page are prefetched (not on AMD's CPUs: tested below)
    monkeypatch.setenv(costs.SHORT_ROW_PREFETCH_ENV, "1")

    def set_size(nbytes: int) -> None:
        monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: nbytes)

    return set_size


def _passes(code: str) -> list[str]:
    """The kernel's code cut at each inner loop over x1 (the passes of a row)."""
    return re.split(r"for\(int64_t x1=", code)[1:]


@requires_vectors
def test_layernorm_prefetches_four_rows_ahead_in_its_last_pass(cache_of):
    cache_of(1 << 20)  # LayerNorm (512, 1024) reads and writes 4 MiB
    fn, args = torch.nn.LayerNorm(1024), (torch.randn(512, 1024),)
    on = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=PREFETCH_OFF)
    assert on.nests == off.nests == [1]
    passes = _passes(on.code)
    assert len(passes) == 3  # sum, squared deviations, normalization
    assert [len(PREFETCH.findall(p)) for p in passes] == [0, 0, 1]
    # the x's own load, 16 KiB ahead: four rows of 4 KiB
    assert PREFETCH.findall(on.code) == [("in_ptr0", "x1 + 1024L*x0", "16384")]
    assert "prefetch_ahead" not in off.code


@requires_vectors
def test_the_prefetch_builtin_sits_under_its_compiler_guard(cache_of):
    # MSVC (Inductor's Windows compiler) has no __builtin_prefetch: the
    # kernel calls a helper that spells the prefetch per compiler
    cache_of(1 << 20)
    fn, args = torch.nn.LayerNorm(1024), (torch.randn(512, 1024),)
    on = compile_shipped_and_inspect(fn, args)
    FileCheck().check("inline void prefetch_ahead(").check(
        "#if defined(__GNUC__) || defined(__clang__)"
    ).check_next("__builtin_prefetch(address").check(
        "#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))"
    ).check_next("_mm_prefetch(address").check(
        "#elif defined(_MSC_VER) && defined(_M_ARM64)"
    ).check_next("__prefetch(address").check("#else").check_next(
        "(void)address;"
    ).check_next("#endif").check("prefetch_ahead(in_ptr0 + ").run(on.code)
    FileCheck().check_count("__builtin_prefetch", 1, exactly=True).check_count(
        "_mm_prefetch", 1, exactly=True
    ).run(on.code)


@requires_vectors
def test_groupnorm_prefetches_the_next_group(cache_of):
    cache_of(64 << 10)
    fn = torch.nn.GroupNorm(4, 32)
    args = (torch.randn(2, 32, 32, 32),)  # groups of 8 x 32 x 32: 32 KiB
    # two threads: the 8 groups split over them (more threads, fewer groups each)
    on = compile_shipped_and_inspect(fn, args, extra_config={"cpp.threads": 2})
    assert on.nests == [1]
    ((pointer, index, ahead),) = PREFETCH.findall(on.code)
    # one group (8192 floats) ahead, whether the fused loop is (N*G) or (N, G)
    assert "8192L*x" in index and ahead == str(8192 * 4)


@requires_vectors
def test_rows_with_a_tail_and_two_threads(cache_of):
    cache_of(1 << 20)
    cols = 62 * vector_lanes() + vector_lanes() // 2  # 1000 on AVX512
    fn, args = torch.nn.LayerNorm(cols), (torch.randn(512, cols),)
    on = compile_shipped_and_inspect(fn, args, extra_config={"cpp.threads": 2})
    assert on.nests == [1] and "#pragma omp for" in on.code
    # the full vectors and the masked tail of the last pass
    assert len(PREFETCH.findall(on.code)) == 2


@requires_vectors  # without vectors nothing is prefetched anywhere
def test_kernel_within_the_cache_is_unchanged(cache_of):
    cache_of(64 << 20)
    fn, args = torch.nn.LayerNorm(1024), (torch.randn(512, 1024),)
    on = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=PREFETCH_OFF)
    assert on.kernels == off.kernels


@requires_vectors
def test_symbolic_row_length_is_not_prefetched(cache_of):
    cache_of(1024)
    fn, args = torch.nn.LayerNorm(1024), (torch.randn(64, 1024),)
    static_rows = compile_shipped_and_inspect(fn, args, dynamic=True)
    assert len(PREFETCH.findall(static_rows.code)) == 1  # only the batch is symbolic
    fn = lambda x: x - x.mean(-1, keepdim=True)  # noqa: E731
    symbolic_rows = compile_shipped_and_inspect(fn, args, dynamic=True)
    assert symbolic_rows.nests == [1] and "ks1*x0" in symbolic_rows.code
    assert "prefetch_ahead" not in symbolic_rows.code


def test_only_affine_indices_with_a_static_stride():
    x0, x1, x2, ks0 = sympy.symbols("x0 x1 x2 ks0", integer=True, nonnegative=True)
    loops = [x0, x1, x2]
    assert static_stride(x2 + 3136 * x1 + 25088 * x0, x0, loops) == 25088
    assert static_stride(x1 + 1024 * x0, x1, loops) == 1
    assert static_stride(x1 + 7, x0, loops) == 0
    assert static_stride(x1 + 1024 * ks0 * x0, x0, loops) == 0  # a symbolic stride
    assert static_stride(x1 + 8 * ModularIndexing(x0, 1, 32), x0, loops) == 0


# The softmax passes as stock arranges them (exponentials stored by the
# max pass's nest, read back by the sum and output passes).
STOCK_PASSES = {**LOOP_ORDERING_OFF, "cpp.outer_block_prepend": False}


@requires_vectors
def test_inputs_that_stay_in_cache_are_not_prefetched(cache_of):
    cache_of(1 << 20)  # inputs under 1/32 of it (32 KiB) stay cached
    mask = torch.randn(64, 64)  # 16 KiB, read by every row's passes

    def masked_softmax(x):
        return torch.softmax(x + mask, -1)

    # Two nests, the first of which prefetches; loop ordering after fusion
    # makes it one nest over unmerged (64, 64) loops, which 0014 leaves alone,
    # and 0020 moves the exponentials into the second nest's local buffer
    # (the first pass then only reads x): both pinned off.
    on = compile_shipped_and_inspect(
        masked_softmax, (torch.randn(64, 64, 64),), extra_config=STOCK_PASSES
    )
    assert "loadu(in_ptr1 + static_cast<int64_t>(x2 + 64L*x1)" in on.code  # mask
    # x (1 MiB) is prefetched 64 rows of 256 bytes ahead, the mask is not
    assert PREFETCH.findall(on.code) == [("in_ptr0", "x2 + 64L*x1 + 4096L*x0", "16384")]


@requires_vectors
def test_a_buffer_updated_in_place_is_prefetched(cache_of):
    # The matmul's output is in_ptr0 in the max pass and in_out_ptr0 in the
    # exp pass, which stores into it: one memory, two pointer names.
    cache_of(1 << 20)
    q, k = torch.randn(2, 8, 256, 64), torch.randn(2, 8, 256, 64)
    mask = torch.randn(256, 256)

    def attention(q, k):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, -1)

    # Loop ordering after fusion joins the max and exp passes into one nest
    # that no longer updates the matmul's output in place; 0020 computes the
    # exponentials into a local buffer in the sum's nest: both pinned off.
    on = compile_shipped_and_inspect(attention, (q, k), extra_config=STOCK_PASSES)
    prefetched = PREFETCH.findall(on.code)
    assert ("in_out_ptr0", "x2 + 256L*x1 + 65536L*x0", "16384") in prefetched


@requires_vectors
def test_a_row_the_last_pass_does_not_read_is_prefetched_in_its_loop(cache_of):
    # softmax's last pass reads its local buffer of exp values, not x; the
    # loop it shares with the max pass (same header) prefetches x's rows.
    cache_of(1 << 20)
    fn, args = (lambda x: torch.softmax(x, -1)), (torch.randn(256, 2048),)
    on = compile_shipped_and_inspect(fn, args)
    assert on.nests == [1] and "local_buffer_data_0" in on.code
    last_pass = _passes(on.code)[-1]
    assert PREFETCH.findall(last_pass) == [("in_ptr0", "x1 + 2048L*x0", "16384")]
    assert "loadu(in_ptr0" not in last_pass


@requires_vectors  # without vectors nothing is prefetched anywhere
def test_a_first_pass_bound_by_its_math_is_not_prefetched(cache_of):
    # bias+GELU+LayerNorm's first pass evaluates erf per element: its rows
    # arrive in time without help (prefetched, it ran 14-16% slower)
    cache_of(1 << 20)
    ln, bias = torch.nn.LayerNorm(768), torch.randn(768)

    def bias_gelu_layernorm(x):
        return ln(F.gelu(x + bias))

    on = compile_shipped_and_inspect(bias_gelu_layernorm, (torch.randn(512, 768),))
    assert on.nests == [1] and "erf" in on.code
    assert "prefetch_ahead" not in on.code


@requires_vectors
def test_rows_of_a_page_are_left_to_amds_hardware_prefetcher(cache_of, monkeypatch):
    monkeypatch.setenv(costs.SHORT_ROW_PREFETCH_ENV, "")  # the vendor's answer
    monkeypatch.setattr(costs, "cpu_vendor", lambda: "AuthenticAMD")
    cache_of(1 << 20)
    fn, args = torch.nn.LayerNorm(1024), (torch.randn(512, 1024),)  # rows of 4 KiB
    assert "prefetch_ahead(" not in compile_shipped_and_inspect(fn, args).code
    # a group of 32 KiB is still prefetched
    cache_of(64 << 10)
    fn, args = torch.nn.GroupNorm(4, 32), (torch.randn(2, 32, 32, 32),)
    assert len(PREFETCH.findall(compile_shipped_and_inspect(fn, args).code)) == 1


def test_the_vendors_answer_and_its_override(monkeypatch):
    monkeypatch.setenv(costs.SHORT_ROW_PREFETCH_ENV, "")
    answers = [("AuthenticAMD", False), ("GenuineIntel", True), ("", True)]
    for vendor, short_rows in answers:
        monkeypatch.setattr(costs, "cpu_vendor", lambda vendor=vendor: vendor)
        assert costs.prefetches_short_rows() is short_rows
    monkeypatch.setenv(costs.SHORT_ROW_PREFETCH_ENV, "1")
    assert costs.prefetches_short_rows()
    monkeypatch.setenv(costs.SHORT_ROW_PREFETCH_ENV, "0")
    monkeypatch.setattr(costs, "cpu_vendor", lambda: "GenuineIntel")
    assert not costs.prefetches_short_rows()

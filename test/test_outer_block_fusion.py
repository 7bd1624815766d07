"""Outer-loop fusion of nodes whose inner loop orders differ.

A reduction over a middle dimension and its broadcasting consumer iterate in
different loop orders; stock 2.13.0 finds no shared data and emits a loop
nest per node.  cpp_fusion/scheduling/block_fusion.py fuses them over their shared
outer loop when every consumer read stays in the block its producer wrote
in the same outer iteration.  Each case compares with eager and counts the
loop nests, stock (all flags off) against the shipped defaults.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from compile_utils import (
    LOOP_ORDERING_OFF,
    compile_shipped_and_inspect,
    vector_lanes,
)
from torch.testing import FileCheck

from torch._inductor.codegen.cpp_fusion.costs import BLOCK_BYTES_IN_CACHE


# 0023 reduces these reductions over 32 rows or more in two levels (blocks
# of rows, then the blocks); the tests here pin 0009's fusions of the
# one-level reductions.  Both together: test_outer_reduction_blocks.py.
ONE_LEVEL = {"cpp.outer_reduction_blocks": False}


def compile_and_inspect(fn, args, *, extra_config=None, **kwargs):
    """The shipped defaults (or all flags off), reductions in one level."""
    return compile_shipped_and_inspect(
        fn, args, extra_config={**ONE_LEVEL, **(extra_config or {})}, **kwargs
    )


def setup_module():
    torch.manual_seed(0)


def center(x):
    return x - x.mean(1, keepdim=True)


def channel_norm(x):
    return (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1e-5).sqrt()


def softmax_dim1(x):
    return torch.softmax(x, 1)


def softmax_dim2(x):
    return torch.softmax(x, 2)


def center_dim2(x):
    return x - x.mean(2, keepdim=True)


def l2_normalize(x):
    return F.normalize(x, dim=1)


def max_subtract(x):
    return x - x.amax(1, keepdim=True)


def rms_over_channels(x):
    return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)


def sum_times(x):
    return x * x.sum(1, keepdim=True)


def absmax_scale(x):
    return x / x.abs().amax(1, keepdim=True)


def min_max_scale(x):
    low, high = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
    return (x - low) / (high - low)


F32, BF16 = torch.float32, torch.bfloat16
# name, program, input shape, dtype, stock nests, patched nests
MISMATCH_PROGRAMS = [
    ("softmax_dim1", softmax_dim1, (8, 16, 784), F32, 4, 1),
    ("softmax_dim1_nchw", softmax_dim1, (4, 16, 28, 28), F32, 4, 1),
    ("softmax_dim2_4d", softmax_dim2, (4, 8, 16, 200), F32, 4, 1),
    ("center_dim1", center, (8, 32, 1000), F32, 2, 1),
    ("center_dim1_tails", center, (6, 17, 999), F32, 2, 1),
    ("center_dim1_bf16", center, (8, 32, 1000), BF16, 2, 1),
    ("center_dim2_4d", center_dim2, (4, 8, 32, 100), F32, 2, 1),
    ("l2_normalize_dim1", l2_normalize, (8, 32, 1000), F32, 2, 1),
    ("max_subtract_dim1", max_subtract, (8, 24, 999), F32, 2, 1),
    ("rms_over_channels", rms_over_channels, (8, 32, 1000), F32, 2, 1),
    ("sum_times_dim1", sum_times, (8, 32, 1000), F32, 2, 1),
    ("absmax_scale_dim1", absmax_scale, (8, 32, 1000), F32, 2, 1),
    ("min_max_scale_dim1", min_max_scale, (8, 32, 1000), F32, 2, 1),
]


@pytest.mark.parametrize(
    "fn, shape, dtype, stock_nests, patched_nests",
    [case[1:] for case in MISMATCH_PROGRAMS],
    ids=[case[0] for case in MISMATCH_PROGRAMS],
)
def test_mismatched_loop_orders_fuse_over_the_shared_outer_loop(
    fn, shape, dtype, stock_nests, patched_nests
):
    x = torch.randn(shape, dtype=dtype)
    stock = compile_and_inspect(fn, (x,), overlay=False)
    patched = compile_and_inspect(fn, (x,))
    assert stock.nests == [stock_nests]
    assert patched.nests == [patched_nests]
    assert patched.outer_fused == 1


@pytest.mark.parametrize(
    "fn",
    [channel_norm, lambda x: x / x.std(1, keepdim=True)],
    ids=["channel_norm_nchw", "std_scale_dim1"],
)
def test_stock_outer_loop_fusions_are_not_extended_block_wise(fn):
    # Mean and variance fuse element by element over (N, L) first; taking in
    # the (N, C*L) consumer would need that node re-nested at depth 1, and a
    # failed merge would then lose the first fusion too.  Stock's 2 nests.
    x = torch.randn(8, 32, 784)
    stock = compile_and_inspect(fn, (x,), overlay=False)
    patched = compile_and_inspect(fn, (x,))
    assert stock.nests == patched.nests == [2]


def test_fuzzed_program_keeps_stock_nest_count():
    # Found by make fuzz: re-nesting a fused GroupNorm-like node to take in a
    # block-wise consumer failed to merge in codegen and emitted 6 loop nests
    # where stock emits 4.
    def program(x0, w2, w3, w4, w5):
        v2 = torch.mean(x0, dim=(-3,), keepdim=False)
        v4 = v2 * torch.rsqrt(v2.pow(2).mean(-1, keepdim=True) + 1e-6)
        v5 = (v4 - v4.mean(-1, keepdim=True)) * torch.rsqrt(
            v4.var(-1, keepdim=True, correction=0) + 1e-5
        )
        v6 = F.group_norm(v5, 1, w2, w3, eps=1e-5)
        return (F.group_norm(v6, 1, w4, w5, eps=1e-5),)

    args = [torch.randn(2, 2, 8).transpose(1, 2)] + [torch.randn(2) for _ in range(4)]
    stock = compile_and_inspect(program, args, overlay=False)
    without_loop_ordering = compile_and_inspect(
        program, args, extra_config=LOOP_ORDERING_OFF
    )
    patched = compile_and_inspect(program, args)
    assert stock.nests == without_loop_ordering.nests == [4]
    # loops open until fusion: one more pair fuses; without vectors no
    # tiling keeps another pair apart
    assert patched.nests == ([3] if vector_lanes() else [2])


def test_block_too_large_for_the_cache_keeps_stock_loops():
    # 64 channels x 3136 floats = 784 KiB per outer iteration, re-read by the
    # second pass: more than BLOCK_BYTES_IN_CACHE.
    # (0019 fuses such blocks over tiles of the pixel loop instead:
    # test_outer_block_tiles.py.)
    x = torch.randn(4, 64, 3136)
    assert 64 * 3136 * 4 > BLOCK_BYTES_IN_CACHE
    patched = compile_and_inspect(
        center, (x,), extra_config={"cpp.outer_block_tiles": False}
    )
    assert patched.nests == [2]
    assert patched.outer_fused == 0


def test_too_few_outer_iterations_for_the_threads_keeps_stock_loops():
    x = torch.randn(1, 32, 1000)  # one outer iteration, two threads
    block_fusion_only = {"cpp.threads": 2, **LOOP_ORDERING_OFF}
    patched = compile_and_inspect(center, (x,), extra_config=block_fusion_only)
    assert patched.nests == [2]


def test_loop_ordering_fuses_one_sample_along_the_kept_dimension():
    # The same single sample under loop ordering after fusion: the consumer
    # takes the mean's loop order, one nest whose parallel outer loop walks
    # the 1000 kept columns (vectorized), summing and centering each column
    # block over the 32 rows.
    x = torch.randn(1, 32, 1000)
    patched = compile_and_inspect(center, (x,), extra_config={"cpp.threads": 2})
    assert patched.nests == [1] and patched.reordered >= 1
    FileCheck().check("#pragma omp for").check("x0<static_cast<int64_t>(1000L)").check(
        "x1<static_cast<int64_t>(32L)"
    ).check("x1<static_cast<int64_t>(32L)").run(patched.code)


def test_read_of_another_outer_block_is_not_fused():
    def next_sample_mean(x):  # row n reads the statistics of row n + 1
        return x - x.mean(1, keepdim=True).roll(1, 0)

    x = torch.randn(8, 32, 1000)
    stock = compile_and_inspect(next_sample_mean, (x,), overlay=False)
    patched = compile_and_inspect(next_sample_mean, (x,))
    assert patched.nests == stock.nests
    assert patched.outer_fused == 0


def test_dynamic_shapes_keep_stock_loops():
    x = torch.randn(8, 32, 1000)
    stock = compile_and_inspect(center, (x,), overlay=False, dynamic=True)
    patched = compile_and_inspect(center, (x,), dynamic=True)
    assert patched.nests == stock.nests == [2]


def test_flag_off_keeps_stock_loops():
    x = torch.randn(8, 16, 784)
    off = compile_and_inspect(
        lambda x: torch.softmax(x, 1), (x,),
        extra_config={"cpp.outer_block_fusion": False},
    )  # fmt: skip
    assert off.nests == [4]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.log_softmax(x, 1),
        lambda x: x - torch.logsumexp(x, 1, keepdim=True),
    ],
    ids=["log_softmax_dim1", "logsumexp_subtract_dim1"],
)
def test_loop_ordering_after_fusion_lets_more_nodes_join(fn):
    # Without loop ordering after fusion the pointwise that combines max and
    # log(sum) sits in its own merged (N*L) loop, which shares no outer loop
    # with the reductions; with it (the default) the loops stay unmerged
    # until fusion and one more block fusion goes through.
    x = torch.randn(8, 16, 784)
    stock = compile_and_inspect(fn, (x,), overlay=False)
    without_loop_ordering = compile_and_inspect(
        fn, (x,), extra_config=LOOP_ORDERING_OFF
    )
    shipped = compile_and_inspect(fn, (x,))
    assert stock.nests == without_loop_ordering.nests == [3]
    assert shipped.nests == [2]

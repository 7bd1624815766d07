"""Outer-loop fusion of nodes whose inner loop orders differ.

A reduction over a middle dimension and its broadcasting consumer iterate in
different loop orders; stock 2.13.0 finds no shared data and emits a loop
nest per node.  cpp_outer_block_fusion.py fuses them over their shared
outer loop when every consumer read stays in the block its producer wrote
in the same outer iteration.  Each case compares with eager and counts the
loop nests, stock (all flags off) against the shipped defaults.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from compile_utils import compile_and_inspect as _compile_and_inspect

from torch._inductor.cpp_outer_block_fusion import BLOCK_BYTES_IN_CACHE

# The shipped defaults: loop ordering after fusion stays off.
SHIPPED = {"cpp.loop_ordering_after_fusion": False}


def compile_and_inspect(fn, args, *, extra_config=None, **kwargs):
    return _compile_and_inspect(
        fn, args, extra_config={**SHIPPED, **(extra_config or {})}, **kwargs
    )


def setup_module():
    torch.manual_seed(0)


def center(x):
    return x - x.mean(1, keepdim=True)


def channel_norm(x):
    return (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1e-5).sqrt()


# name, program, input shape, dtype, stock nests, patched nests
MISMATCH_PROGRAMS = [
    ("softmax_dim1", lambda x: torch.softmax(x, 1), (8, 16, 784), torch.float32, 4, 1),
    ("softmax_dim1_nchw", lambda x: torch.softmax(x, 1), (4, 16, 28, 28), torch.float32, 4, 1),
    ("softmax_dim2_4d", lambda x: torch.softmax(x, 2), (4, 8, 16, 200), torch.float32, 4, 1),
    ("center_dim1", center, (8, 32, 1000), torch.float32, 2, 1),
    ("center_dim1_tails", center, (6, 17, 999), torch.float32, 2, 1),
    ("center_dim1_bf16", center, (8, 32, 1000), torch.bfloat16, 2, 1),
    ("center_dim2_4d", lambda x: x - x.mean(2, keepdim=True), (4, 8, 32, 100), torch.float32, 2, 1),
    ("l2_normalize_dim1", lambda x: F.normalize(x, dim=1), (8, 32, 1000), torch.float32, 2, 1),
    ("max_subtract_dim1", lambda x: x - x.amax(1, keepdim=True), (8, 24, 999), torch.float32, 2, 1),
    ("channel_norm_nchw", channel_norm, (8, 32, 784), torch.float32, 2, 1),
    ("rms_over_channels", lambda x: x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6), (8, 32, 1000), torch.float32, 2, 1),
    ("sum_times_dim1", lambda x: x * x.sum(1, keepdim=True), (8, 32, 1000), torch.float32, 2, 1),
    ("absmax_scale_dim1", lambda x: x / x.abs().amax(1, keepdim=True), (8, 32, 1000), torch.float32, 2, 1),
    ("std_scale_dim1", lambda x: x / x.std(1, keepdim=True), (8, 32, 1000), torch.float32, 2, 1),
    ("min_max_scale_dim1", lambda x: (x - x.amin(1, keepdim=True)) / (x.amax(1, keepdim=True) - x.amin(1, keepdim=True)), (8, 32, 1000), torch.float32, 2, 1),
]  # fmt: skip


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


def test_block_too_large_for_the_cache_keeps_stock_loops():
    # 64 channels x 3136 floats = 784 KiB per outer iteration, re-read by the
    # second pass: more than BLOCK_BYTES_IN_CACHE.
    x = torch.randn(4, 64, 3136)
    assert 64 * 3136 * 4 > BLOCK_BYTES_IN_CACHE
    patched = compile_and_inspect(center, (x,))
    assert patched.nests == [2]
    assert patched.outer_fused == 0


def test_too_few_outer_iterations_for_the_threads_keeps_stock_loops():
    x = torch.randn(1, 32, 1000)  # one outer iteration, two threads
    patched = compile_and_inspect(center, (x,), extra_config={"cpp.threads": 2})
    assert patched.nests == [2]


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
        extra_config={"cpp.outer_loop_fusion_retile": False},
    )  # fmt: skip
    assert off.nests == [4]


@pytest.mark.parametrize(
    "fn",
    [lambda x: torch.log_softmax(x, 1), lambda x: x - torch.logsumexp(x, 1, keepdim=True)],
    ids=["log_softmax_dim1", "logsumexp_subtract_dim1"],
)
def test_loop_ordering_after_fusion_lets_the_last_pointwise_join(fn):
    # The shipped defaults leave the pointwise that combines max and
    # log(sum) in its own merged (N*L) loop, which shares no outer loop with
    # the reductions; with loop ordering after fusion the loops stay unmerged
    # until fusion and the whole program is one outer-block fusion.
    x = torch.randn(8, 16, 784)
    stock = compile_and_inspect(fn, (x,), overlay=False)
    shipped = compile_and_inspect(fn, (x,))
    with_loop_ordering = compile_and_inspect(
        fn, (x,), extra_config={"cpp.loop_ordering_after_fusion": True}
    )
    assert stock.nests == shipped.nests == [3]
    assert with_loop_ordering.nests == [1]

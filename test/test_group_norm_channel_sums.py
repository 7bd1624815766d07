"""Channels-last GroupNorm: statistics per channel, then per group
(cpp.group_norm_channel_sums).

The tests read the decomposed graph (sums over pixel blocks, no var_mean
over the group view) and the generated kernels (the statistics in their own
nests), check agreement with eager on the inputs a per-channel combination
could get wrong (channels whose means differ widely, a large common offset,
one channel per group, bfloat16, no affine parameters, mean and rstd
outputs), and where the decomposition keeps the core one.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from compile_utils import (
    SHIPPED_DEFAULTS,
    compile_and_run,
    compile_shipped_and_inspect,
    tolerance,
)
from torch._inductor import config
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

import torch._inductor.codegen.cpp_fusion.costs as costs
from torch._inductor.codegen.cpp_fusion.lowering import (
    group_norm_channel_sums as channel_sums,
)

SUMS_OFF = {"cpp.group_norm_channel_sums": False}
aten = torch.ops.aten
SHIPPED_MIN_BYTES = costs.GROUP_NORM_CHANNEL_SUMS_MIN_BYTES


@pytest.fixture(autouse=True)
def any_size(monkeypatch):
    """The decomposition itself on small inputs: no size threshold, except
    in the tests of the threshold (which restore the shipped one)."""
    monkeypatch.setattr(costs, "GROUP_NORM_CHANNEL_SUMS_MIN_BYTES", 0)


def _channels_last(*shape) -> torch.Tensor:
    x = torch.randn(*shape)
    spatial = list(range(2, x.ndim))
    rows = x.permute(0, *spatial, 1).contiguous()
    return rows.permute(0, -1, *[d - 1 for d in spatial])


def _group_norm(groups, affine=True):
    def fn(x):
        c = x.shape[1]
        weight = torch.linspace(0.5, 2.0, c, dtype=x.dtype) if affine else None
        bias = torch.linspace(-1.0, 1.0, c, dtype=x.dtype) if affine else None
        return F.group_norm(x, groups, weight, bias)

    return fn


def _decomposed_ops(x: torch.Tensor, groups: int) -> set:
    """The aten ops Inductor lowers for a GroupNorm of x."""
    n, c = x.shape[:2]

    def fn(x):
        pixels = x[0, 0].numel()
        return aten.native_group_norm(x, None, None, n, c, pixels, groups, 1e-5)

    graph = make_fx(fn, decomposition_table=select_decomp_table())(x).graph
    return {node.target for node in graph.nodes if node.op == "call_function"}


def test_channels_last_statistics_are_channel_sums():
    x = _channels_last(2, 40, 8, 8)
    with config.patch(SHIPPED_DEFAULTS):
        ops = _decomposed_ops(x, 4)
    assert aten.var_mean.correction not in ops
    assert aten.sum.dim_IntList in ops
    with config.patch(SUMS_OFF):
        assert aten.var_mean.correction in _decomposed_ops(x, 4)


def test_statistics_get_their_own_nests():
    """Per-channel sums over the blocks, then over the blocks' sums, twice
    (means, squared deviations), then the group combination: where stock
    makes one statistics nest per group."""
    fn, args = _group_norm(8), (_channels_last(2, 160, 16, 16),)
    patched = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=SUMS_OFF)
    assert patched.total_nests > off.total_nests
    (got,), _ = compile_and_run(fn, args, extra_config=SHIPPED_DEFAULTS)
    assert got.is_contiguous(memory_format=torch.channels_last)


def test_contiguous_input_keeps_the_core_decomposition():
    fn, args = _group_norm(8), (torch.randn(2, 160, 16, 16),)
    patched = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=SUMS_OFF)
    assert patched.kernels == off.kernels


@pytest.mark.parametrize(
    "shape, groups",
    [
        ((2, 60, 7, 7), 3),  # 20 channels per group, 49 pixels in blocks of 7
        ((1, 40, 5, 3), 8),  # 15 pixels: one block
        ((2, 32, 6, 6), 32),  # one channel per group
        ((1, 16, 4, 4, 4), 2),  # channels-last 3-D
    ],
)
def test_channels_last_agrees_with_eager(shape, groups):
    compile_shipped_and_inspect(_group_norm(groups), (_channels_last(*shape),))


def test_channel_means_far_apart_and_a_large_offset():
    """Chan's combination adds each channel's spread around the group mean;
    subtracting each channel's own mean keeps the sums small however far
    the values sit from zero."""
    x = _channels_last(2, 64, 8, 8)
    x = x * 0.01 + 1000.0 + torch.arange(64.0).view(1, 64, 1, 1) * 10.0
    fn = _group_norm(8)
    (got,), _ = compile_and_run(fn, (x,), extra_config=SHIPPED_DEFAULTS)
    want = fn(x.double()).float()
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)


def test_bfloat16_and_no_affine_parameters():
    x = _channels_last(2, 64, 8, 8).bfloat16()
    compile_shipped_and_inspect(_group_norm(8, affine=False), (x,))
    compile_shipped_and_inspect(_group_norm(8), (x,))


def test_mean_and_rstd_outputs_agree_with_eager():
    x = _channels_last(2, 60, 7, 7)

    def fn(x):
        return aten.native_group_norm(x, None, None, 2, 60, 49, 3, 1e-5)

    got, _ = compile_and_run(fn, (x,), extra_config=SHIPPED_DEFAULTS)
    for g, w in zip(got, fn(x), strict=True):
        torch.testing.assert_close(g, w, **tolerance(torch.float32))


def test_pixel_blocks_divide_the_pixels():
    assert channel_sums.pixel_block(15) == 15
    assert channel_sums.pixel_block(1024) == 16
    assert channel_sums.pixel_block(49) == 7
    assert channel_sums.pixel_block(34) is None  # 2 x 17: blocks of 2


def test_channel_sums_only_for_channels_last_inputs_with_the_flag():
    x = _channels_last(2, 8, 4, 4)
    assert channel_sums.sums_per_channel(x)
    assert not channel_sums.sums_per_channel(x.contiguous())
    assert not channel_sums.sums_per_channel(_channels_last(2, 8, 17, 2))
    # ATen's GroupNorm takes a 3-D input contiguous only (F.group_norm makes
    # it so; native_group_norm refuses channels innermost)
    assert not channel_sums.sums_per_channel(_channels_last(2, 8, 16))
    with config.patch(SUMS_OFF):
        assert not channel_sums.sums_per_channel(x)


def test_only_the_cpp_backend_of_the_cpu_decomposes_by_channel_sums():
    """decomposition.py asks the backend of the input's device
    (BaseScheduling.decompose): another device, or another CPU backend,
    keeps the core decomposition."""
    x = _channels_last(2, 40, 8, 8)
    with config.patch(SHIPPED_DEFAULTS):
        assert aten.var_mean.correction not in _decomposed_ops(x, 4)
        assert aten.var_mean.correction in _decomposed_ops(x.to("meta"), 4)
        with config.patch(cpu_backend="triton"):
            assert aten.var_mean.correction in _decomposed_ops(x, 4)


def test_small_inputs_keep_the_core_decomposition(monkeypatch):
    """Four nests instead of two cost more than they save on small maps:
    upstream's test_group_norm_vec shape, GroupNorm(3, 90) over channels-last
    (2, 90, 6, 6), compiles as with the flag off; a map of 256 KiB sums."""
    monkeypatch.setattr(costs, "GROUP_NORM_CHANNEL_SUMS_MIN_BYTES", SHIPPED_MIN_BYTES)
    assert 2 * 90 * 16 * 16 * 4 < SHIPPED_MIN_BYTES <= 2 * 128 * 16 * 16 * 4
    assert not channel_sums.sums_per_channel(_channels_last(2, 90, 16, 16))
    assert channel_sums.sums_per_channel(_channels_last(2, 128, 16, 16))
    fn, args = _group_norm(3), (_channels_last(2, 90, 6, 6),)
    patched = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=SUMS_OFF)
    assert patched.kernels == off.kernels

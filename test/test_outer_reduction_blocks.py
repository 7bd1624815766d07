"""Reductions over an outer or middle dim in blocks of rows
(cpp.outer_reduction_blocks).

The tests read the generated wrapper (the buffer of per-block partial
results that the first level writes, one per block of rows) and check
agreement with eager where a split could go wrong: a row count no block
size divides (a masked last block, whose padding must be the reduction's
identity), all-negative maxima, bfloat16, channels-last average pooling, a
softmax over dim 1; and where stock's single level is kept: reductions
over the contiguous dim, small inputs, an arg reduction, and the flags off.
"""

from __future__ import annotations

import pytest
import torch
from compile_utils import SHIPPED_DEFAULTS, compile_shipped_and_inspect, tolerance
from torch._inductor import config
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck

import torch._inductor.codegen.cpp_fusion.costs as costs
import torch._inductor.codegen.cpp_fusion.lowering.outer_reduction_blocks as blocks
from torch._inductor.codegen.cpp_fusion.costs import OUTER_REDUCTION_BLOCK_ROWS

BLOCKS_OFF = {"cpp.outer_reduction_blocks": False}
CACHE_BYTES = 32 << 20


@pytest.fixture(autouse=True)
def last_level_cache(monkeypatch):
    """A 32 MiB last-level cache, whatever this machine's: the slab bound
    (half of it) decides which of these reductions split."""
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: CACHE_BYTES)


def _wrapper(fn, *args, extra=None) -> str:
    """The generated module's source, after checking agreement with eager."""
    with config.patch({**SHIPPED_DEFAULTS, **(extra or {})}):
        torch._dynamo.reset()
        got, (code,) = run_and_get_code(torch.compile(fn), *args)
    want = fn(*args)
    torch.testing.assert_close(got, want, **tolerance(want.dtype))
    return code


def _partials(shape) -> str:
    """The wrapper's allocation of the first level's partial results."""
    return f"empty_strided_cpu({shape}, "


def test_sum_over_the_middle_dim_reduces_blocks_of_rows():
    x = torch.randn(2, 1024, 640)
    blocks_of_rows = 1024 // OUTER_REDUCTION_BLOCK_ROWS
    code = _wrapper(lambda x: x.sum(1), x)
    FileCheck().check(_partials((2, 640, blocks_of_rows))).run(code)
    stock = _wrapper(lambda x: x.sum(1), x, extra=BLOCKS_OFF)
    FileCheck().check_not(_partials((2, 640, blocks_of_rows))).run(stock)


def test_sum_over_the_outer_dim_reduces_blocks_of_rows():
    code = _wrapper(lambda x: x.sum(0), torch.randn(1024, 640))
    FileCheck().check(_partials((640, 1024 // OUTER_REDUCTION_BLOCK_ROWS))).run(code)


def test_channels_last_average_pool_reduces_blocks_of_pixels():
    x = torch.randn(2, 640, 32, 32).to(memory_format=torch.channels_last)
    code = _wrapper(lambda x: x.mean((2, 3)), x)
    FileCheck().check(_partials((2, 640, 32 * 32 // OUTER_REDUCTION_BLOCK_ROWS))).run(
        code
    )


@pytest.mark.parametrize("reduce", [torch.amax, torch.amin, torch.sum, torch.prod])
def test_a_masked_last_block_pads_with_the_identity(reduce):
    """197 rows (a prime): blocks of 16 rows and a masked last block, whose
    padding is the reduction's identity: -inf for a maximum over negative
    values, +inf for a minimum over positive ones, 1 for a product."""
    x = torch.rand(8, 197, 192) + 0.5  # rows 768 bytes apart: a 148 KiB slab
    sign = -1.0 if reduce is torch.amax else 1.0
    if reduce is torch.prod:
        x = 1.0 + (x - 1.0) * 0.01  # products of 197 factors near 1

    def fn(x):
        return reduce(x * sign, 1)

    assert blocks.block_rows(197) == OUTER_REDUCTION_BLOCK_ROWS
    code = _wrapper(fn, x)
    FileCheck().check(_partials((8, 192, -(-197 // OUTER_REDUCTION_BLOCK_ROWS)))).run(
        code
    )


def test_a_chain_larger_than_half_the_cache_keeps_one_level(monkeypatch):
    """log_softmax over dim 0 of (700, 2000): its sum of exps needs the
    whole max; blocked, it would read the 5.6 MB input again after all of
    the max's blocks, where the one-level column walks read each strip of
    columns twice from L1.  Under a 4 MiB cache the input does not stay
    cached: one level."""

    def fn(x):
        return torch.log_softmax(x, 0)

    x = torch.randn(700, 2000)
    assert blocks.block_rows(700) == 14
    FileCheck().check(_partials((1, 2000, 50))).run(_wrapper(fn, x))
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 4 << 20)
    patched = compile_shipped_and_inspect(fn, (x,))
    off = compile_shipped_and_inspect(fn, (x,), extra_config=BLOCKS_OFF)
    assert patched.kernels == off.kernels


def test_a_chain_over_close_rows_keeps_one_level():
    """log_softmax over the 1000 channels of flattened 7x7 maps: rows 196
    bytes apart, which the column walk follows within a page.  The blocks
    would gain nothing on the walk and cost the chain its fused second walk
    (a pass more); one level.  The same chain over rows of 768 floats (3 KiB
    apart) splits, as does a lone sum over the close rows."""

    def fn(x):
        return torch.log_softmax(x, 1)

    x = torch.randn(32, 1000, 49)
    assert 49 * 4 < costs.OUTER_REDUCTION_CHAIN_MIN_ROW_STRIDE_BYTES <= 768 * 4
    patched = compile_shipped_and_inspect(fn, (x,))
    off = compile_shipped_and_inspect(fn, (x,), extra_config=BLOCKS_OFF)
    assert patched.kernels == off.kernels
    FileCheck().check_not(_partials((32, 1, 49, 50))).run(_wrapper(fn, x))
    wide = _wrapper(fn, torch.randn(4, 1000, 768))
    FileCheck().check(_partials((4, 1, 768, 50))).run(wide)
    lone = _wrapper(lambda x: x.sum(1), x)
    FileCheck().check(_partials((32, 49, 50))).run(lone)


def test_a_slab_that_stays_in_cache_keeps_one_level():
    """x.sum(1) over (100, 100, 100) (upstream's test_vertical_sum_cpu_only):
    4 MB of input, but the column walk under one output row re-reads only
    100 rows of 400 bytes, 40 KiB, which stay in cache; the blocks would
    only add a level.  Over 1000 such rows (390 KiB) they split."""
    x = torch.randn(100, 100, 100)
    assert 100 * 100 * 4 < costs.OUTER_REDUCTION_MIN_BYTES <= 1000 * 100 * 4
    patched = compile_shipped_and_inspect(lambda x: x.sum(1), (x,))
    off = compile_shipped_and_inspect(lambda x: x.sum(1), (x,), extra_config=BLOCKS_OFF)
    assert patched.kernels == off.kernels
    code = _wrapper(lambda x: x.sum(1), torch.randn(4, 1000, 100))
    FileCheck().check(_partials((4, 100, 50))).run(code)


def test_a_lone_reduction_splits_whatever_its_size(monkeypatch):
    """No second reduction re-reads the input: the 8 MB input splits under
    a 4 MiB cache too."""
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 4 << 20)
    code = _wrapper(lambda x: x.sum(0) * 2.0, torch.randn(1024, 2000))
    FileCheck().check(_partials((2000, 64))).run(code)


def test_a_variance_is_a_chain_of_its_own(monkeypatch):
    """A LayerNorm over channels-first memory lowers one var_mean node to
    two sums (0004), the second over deviations from the first: over 6 MB
    under a 4 MiB cache, one level."""
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 4 << 20)
    x = torch.randn(2, 256, 3136).permute(0, 2, 1)
    fn = torch.nn.LayerNorm(256)
    patched = compile_shipped_and_inspect(fn, (x,))
    off = compile_shipped_and_inspect(fn, (x,), extra_config=BLOCKS_OFF)
    assert patched.kernels == off.kernels


def test_layer_norm_over_channels_first_memory():
    """Swin's LayerNorm(96) over tokens stored channels-first: the mean and
    the variance (0004's two sums) reduce along a stride of 3136 elements,
    a chain over 2.4 MB: both split."""
    x = torch.randn(2, 96, 3136).permute(0, 2, 1)
    code = _wrapper(torch.nn.LayerNorm(96), x)
    partials = _partials((2, 3136, 1, 6))
    FileCheck().check(partials).check(partials).run(code)


def test_block_rows_divide_the_rows_where_they_can():
    assert blocks.block_rows(1024) == 16
    assert blocks.block_rows(196) == 14
    assert blocks.block_rows(3136) == 16
    assert blocks.block_rows(50) == 10
    assert blocks.block_rows(49) == 16  # 7 x 7: a masked last block
    assert blocks.block_rows(197) == 16


def test_bfloat16_sums_keep_float_partials():
    x = torch.randn(4, 256, 256).bfloat16()
    code = _wrapper(lambda x: x.sum(1), x)
    FileCheck().check(_partials((4, 256, 16))).check("torch.float32").run(code)


def test_softmax_over_dim_1_splits_its_max_and_sum():
    x = torch.randn(8, 197, 768) * 8.0
    code = _wrapper(lambda x: torch.softmax(x, 1), x)
    partials = _partials((8, 1, 768, 13))  # keepdim
    FileCheck().check(partials).check(partials).run(code)


def test_mean_subtracted_from_its_rows():
    """A broadcasting consumer of the split mean: 0009 still fuses it with
    both levels over the shared outer loop."""
    x = torch.randn(8, 64, 1000) + 3.0
    patched = compile_shipped_and_inspect(lambda x: x - x.mean(1, keepdim=True), (x,))
    assert patched.nests == [1]
    FileCheck().check(_partials((8, 1, 1000, 4))).run(patched.code)


def test_variance_over_the_middle_dim():
    """var_mean's two-step lowering (0004) is two sums, both split."""
    x = torch.randn(2, 1024, 640) * 3.0 + 100.0
    compile_shipped_and_inspect(lambda x: torch.var_mean(x, 1), (x,))


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda x: x.sum(-1), torch.randn(64, 4096)),  # contiguous rows
        (lambda x: x.sum(1), torch.randn(1, 64, 128)),  # 32 KiB
        (lambda x: x.argmax(1), torch.randn(2, 1024, 640)),
        (lambda x: x.sum(1), torch.randn(2, 1024, 8)),  # 8 lanes wide
    ],
    ids=["inner", "small", "argmax", "narrow"],
)
def test_other_reductions_keep_stock_kernels(fn, x):
    patched = compile_shipped_and_inspect(fn, (x,))
    off = compile_shipped_and_inspect(fn, (x,), extra_config=BLOCKS_OFF)
    assert patched.kernels == off.kernels


def test_split_reductions_off_keeps_stock_kernels():
    fn, x = (lambda x: x.sum(1)), torch.randn(2, 1024, 640)
    patched = compile_shipped_and_inspect(
        fn, (x,), extra_config={"split_reductions": False}
    )
    off = compile_shipped_and_inspect(fn, (x,), extra_config=BLOCKS_OFF)
    assert patched.kernels == off.kernels


def test_no_split_on_other_devices_or_backends():
    args = (torch.float32, None, [640], [1024], "sum")
    with config.patch(SHIPPED_DEFAULTS):
        assert blocks.split_for_outer_reduction(torch.device("meta"), *args) == 1
        with config.patch(cpu_backend="triton"):
            assert blocks.split_for_outer_reduction(torch.device("cpu"), *args) == 1
        assert (
            blocks.split_for_outer_reduction(
                torch.device("cpu"), torch.float32, None, [640], [1024], "xor_sum"
            )
            == 1
        )

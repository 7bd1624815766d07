"""Outer-block fusion over tiles of the innermost loop.

Softmax and log_softmax over the few channels of an NCHW image keep two loop
nests in stock: the statistics at each pixel, then the output.  0009 fuses
them image by image only when an image fits its cache budget.
cpp_fusion/scheduling/block_tiles.py tiles the pixel loop, (N, C, P) -> (N, P/T, C, T),
so that the pair fuses over (N, P/T) with a block of C*T pixels; softmax's
two pointwise kernels over the same (N, C, P) loops, which stock would fuse
over all of them, fuse over the loops where every read stays in its block.
"""

from __future__ import annotations

import pytest
import torch
from compile_utils import compile_shipped_and_inspect, requires_vectors
from torch.testing import FileCheck

import torch._inductor.codegen.cpp_fusion.costs as costs

from torch._inductor.codegen.cpp_fusion.costs import (
    BLOCK_BYTES_IN_CACHE,
    min_tile,
    TILE_BYTES_IN_CACHE,
    tile_lanes,
)

pytestmark = requires_vectors

THREADS = {"cpp.threads": 2}


def setup_module():
    torch.manual_seed(0)


def softmax_over_channels(x):
    return torch.softmax(x, 1)


def log_softmax_over_channels(x):
    return torch.log_softmax(x, 1)


def next_pixel_ratio(x):
    e = torch.exp(x - x.amax(1, keepdim=True))
    return torch.roll(e, 1, -1) / e.sum(1, keepdim=True)


def _tile(pixels: int, bytes_per_pixel: int, channels: int = 3) -> int:
    """The largest whole-vector (float32) divisor of the pixel loop whose tile
    of the consumer's reads fits TILE_BYTES_IN_CACHE, other than the channel
    count (which would give the tiled kernels one more loop in common)."""
    lanes = tile_lanes(4)
    return max(
        t
        for t in range(lanes, pixels // 2 + 1, lanes)
        if t >= min_tile(4)
        and pixels % t == 0
        and t * bytes_per_pixel <= TILE_BYTES_IN_CACHE
        and t != channels
    )


def _loop(extent: int) -> str:
    return f"<static_cast<int64_t>({extent}L);"


def _check_tiled(code: str, batch: int | None, channels: int, pixels: int, tile: int):
    """One nest: batch (if any), tile index, then the two kernels' (channel,
    pixel) loops."""
    check = FileCheck().check(_loop(batch)) if batch else FileCheck()
    check = check.check(_loop(pixels // tile))
    for _ in range(2):
        check = check.check(_loop(channels)).check(_loop(tile))
    check.run(code)


def test_image_exceeds_the_block_budget():
    # What makes the cases below need tiles: one image of (3, 256, 256).
    assert 3 * 256 * 256 * 4 > BLOCK_BYTES_IN_CACHE


@pytest.fixture
def pair_exceeds_the_cache(monkeypatch):
    """A last-level cache that softmax's pair of pointwise kernels exceeds
    (they tile only then; the statistics and their consumer tile anyway)."""
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 1 << 20)


def _stock_and_patched(fn, x):
    stock = compile_shipped_and_inspect(fn, (x,), overlay=False, extra_config=THREADS)
    return stock, compile_shipped_and_inspect(fn, (x,), extra_config=THREADS)


def _check_log_softmax_tiled(code: str, batch: int | None, pixels: int, tile: int):
    """One nest: batch (if any), tile index, then the statistic over the
    tile and the output over (channel, tile)."""
    check = FileCheck().check(_loop(batch)) if batch else FileCheck()
    check.check(_loop(pixels // tile)).check(_loop(tile)).check(_loop(3)).check(
        _loop(tile)
    ).run(code)


def test_softmax_over_channels_is_one_nest_over_pixel_tiles(pair_exceeds_the_cache):
    stock, patched = _stock_and_patched(
        softmax_over_channels, torch.randn(4, 3, 256, 256)
    )
    assert (stock.nests, patched.nests) == ([2], [1])
    # the consumer reads the three exponentials at each pixel: 12 bytes
    _check_tiled(patched.kernels[0], 4, 3, 256 * 256, _tile(256 * 256, 12))


def test_log_softmax_over_channels_is_one_nest_over_pixel_tiles():
    _, patched = _stock_and_patched(
        log_softmax_over_channels, torch.randn(4, 3, 256, 256)
    )
    assert patched.nests == [1]
    # the consumer reads the three inputs and the statistic: 16 bytes a pixel
    (kernel,) = patched.kernels
    _check_log_softmax_tiled(kernel, 4, 256 * 256, _tile(256 * 256, 16))


def test_log_softmax_of_one_image_fuses_over_pixel_tiles_alone():
    # No batch loop: the statistic loops over (P), the output over (C, P),
    # and the pixel tiles are the only loop the two kernels share.
    stock, patched = _stock_and_patched(
        log_softmax_over_channels, torch.randn(1, 3, 256, 256)
    )
    assert (stock.nests, patched.nests) == ([2], [1])
    (kernel,) = patched.kernels
    _check_log_softmax_tiled(kernel, None, 256 * 256, _tile(256 * 256, 16))


def test_softmax_of_one_image_fuses_over_pixel_tiles_alone(pair_exceeds_the_cache):
    stock, patched = _stock_and_patched(
        softmax_over_channels, torch.randn(1, 3, 256, 256)
    )
    assert (stock.nests, patched.nests) == ([2], [1])
    _check_tiled(patched.kernels[0], None, 3, 256 * 256, _tile(256 * 256, 12))


def test_float32_tiles_are_whole_vectors_of_float32_lanes():
    # 64 channels of 56x56 (800 KiB an image): the only whole-vector tile of
    # 3136 pixels in 64s is 64 itself, the channel count; float32's lanes
    # give a tile of 112.  0023 would split the statistics of an input this
    # small (a chain that stays in the last-level cache): off here.
    config = {**THREADS, "cpp.outer_reduction_blocks": False}
    x = torch.randn(2, 64, 56, 56)
    stock = compile_shipped_and_inspect(
        softmax_over_channels, (x,), overlay=False, extra_config=THREADS
    )
    patched = compile_shipped_and_inspect(
        softmax_over_channels, (x,), extra_config=config
    )
    assert (stock.nests, patched.nests) == ([4], [1])
    tile = _tile(56 * 56, 64 * 4, channels=64)
    assert tile % 64 != 0
    _check_tiled(patched.kernels[0], 2, 64, 56 * 56, tile)


def test_tiles_of_a_cache_line_a_row_are_refused():
    # softmax over dim 0 of (512, 1024): a column of the consumer's reads is
    # 2 KiB, so the budget allows tiles of 16 floats, one cache line of each
    # row; the tiled kernels would walk down 512 rows of one line each.
    x = torch.randn(512, 1024)
    assert 16 * 512 * 4 <= TILE_BYTES_IN_CACHE and 16 < min_tile(4)
    one_level = {**THREADS, "cpp.outer_reduction_blocks": False}
    fn = lambda x: torch.softmax(x, 0)  # noqa: E731
    stock = compile_shipped_and_inspect(fn, (x,), overlay=False, extra_config=THREADS)
    patched = compile_shipped_and_inspect(fn, (x,), extra_config=one_level)
    assert patched.nests == stock.nests == [4]


def test_softmax_whose_buffers_fit_in_the_cache_keeps_its_two_nests(monkeypatch):
    # (4, 3, 256, 256): input, exponentials and output 9 MiB.  Its
    # exponentials go to a global buffer either way; tiled, only their
    # re-read from the last-level cache is saved.  log_softmax's statistics
    # and output still tile (the consumer re-reads the input from L1).
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 32 << 20)
    x = torch.randn(4, 3, 256, 256)
    assert 3 * x.numel() * 4 < 32 << 20
    softmax = compile_shipped_and_inspect(
        softmax_over_channels, (x,), extra_config=THREADS
    )
    log_softmax = compile_shipped_and_inspect(
        log_softmax_over_channels, (x,), extra_config=THREADS
    )
    assert (softmax.nests, log_softmax.nests) == ([2], [1])


def test_flag_off_keeps_stocks_nests():
    x = torch.randn(4, 3, 256, 256)
    off = {**THREADS, "cpp.outer_block_tiles": False}
    for fn in (softmax_over_channels, log_softmax_over_channels):
        compiled = compile_shipped_and_inspect(fn, (x,), extra_config=off)
        assert compiled.nests == [2], fn.__name__


def test_softmax_of_small_images_fuses_per_image_without_tiles():
    # One image fits the budget: the two kernels over the same (N, C, P)
    # loops fuse over N alone, where every read stays in its image.
    x = torch.randn(4, 3, 32, 32)
    patched = compile_shipped_and_inspect(
        softmax_over_channels, (x,), extra_config=THREADS
    )
    assert patched.nests == [1]
    (kernel,) = patched.kernels
    check = FileCheck().check(_loop(4))
    for _ in range(2):
        check = check.check(_loop(3)).check(_loop(32 * 32))
    check.run(kernel)


def test_a_consumer_reading_another_pixel_keeps_its_nests():
    # roll reads the exponential of the previous pixel, across tile borders
    x = torch.randn(4, 3, 256 * 256)
    stock = compile_shipped_and_inspect(
        next_pixel_ratio, (x,), overlay=False, extra_config=THREADS
    )
    patched = compile_shipped_and_inspect(next_pixel_ratio, (x,), extra_config=THREADS)
    assert patched.total_nests == stock.total_nests


def _check_statistics_tiled(
    code: str, batch: int, channels: int, pixels: int, tile: int
):
    """One nest: batch, tile index, the three statistics members over the
    tile (maximum, sum of exponentials, log), then the output over
    (channel, tile)."""
    check = FileCheck().check(_loop(batch)).check(_loop(pixels // tile))
    for _ in range(3):
        check = check.check(_loop(tile))
    check.check(_loop(channels)).check(_loop(tile)).run(code)


def test_log_softmax_statistics_fused_over_all_loops_join_their_output(
    pair_exceeds_the_cache,
):
    # 48 channels: the maximum, the sum and its log merge into one nest fused
    # over (N, P); tiled, (N, P/T, T) fused over (N, P/T), which the tiled
    # output shares.  The consumer reads 48 inputs and 2 statistics a pixel.
    x = torch.randn(4, 48, 32, 32)
    stock, patched = _stock_and_patched(log_softmax_over_channels, x)
    assert (stock.nests, patched.nests) == ([3], [1])
    tile = _tile(32 * 32, 50 * 4, channels=48)
    _check_statistics_tiled(patched.kernels[0], 4, 48, 32 * 32, tile)


def test_statistics_over_many_channels_take_the_smallest_tile_in_l2(
    pair_exceeds_the_cache,
):
    # 150 channels (a segmentation head): 64 pixels of 152 floats exceed
    # TILE_BYTES_IN_CACHE, so no tile fits in L1; the smallest fits in L2.
    x = torch.randn(2, 150, 32, 32)
    assert min_tile(4) * 152 * 4 > TILE_BYTES_IN_CACHE
    assert min_tile(4) * 152 * 4 <= BLOCK_BYTES_IN_CACHE
    _, patched = _stock_and_patched(log_softmax_over_channels, x)
    assert patched.nests == [1]
    _check_statistics_tiled(patched.kernels[0], 2, 150, 32 * 32, min_tile(4))


def test_statistics_whose_pair_fits_in_the_cache_stay_apart(monkeypatch):
    # In cache the tiled walk costs more than the output's re-read it saves.
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 32 << 20)
    x = torch.randn(4, 48, 32, 32)
    patched = compile_shipped_and_inspect(
        log_softmax_over_channels, (x,), extra_config=THREADS
    )
    untiled = compile_shipped_and_inspect(
        log_softmax_over_channels,
        (x,),
        extra_config={**THREADS, "cpp.outer_block_tiles": False},
    )
    assert patched.kernels == untiled.kernels
    assert patched.total_nests > 1


def test_statistics_read_at_another_pixel_stay_apart(pair_exceeds_the_cache):
    # The output reads the log-sum-exp of the previous pixel, across tiles.
    def shifted(x):
        return x - torch.roll(torch.logsumexp(x, 1, keepdim=True), 1, -1)

    x = torch.randn(4, 48, 32, 32)
    stock, patched = _stock_and_patched(shifted, x)
    assert patched.total_nests >= 2
    assert patched.total_nests <= stock.total_nests


def normalized_over_channels(x):
    # mean and variance fuse into one node, an outer-loop fused member
    return (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1e-5).sqrt()


@pytest.mark.parametrize(
    "fn, loop_ordering",
    # log_softmax's members are its three leaves; with loop ordering after
    # fusion off, the norm's mean and variance are one fused member, whose
    # group that ordering's merge after fusion would otherwise recompute
    [(log_softmax_over_channels, True), (normalized_over_channels, False)],
)
def test_a_refused_statistics_fusion_restores_their_loops(
    fn, loop_ordering, pair_exceeds_the_cache, monkeypatch
):
    # The scheduler may refuse the pair after the tiles were applied (here:
    # every vertical fusion into the three statistics); its rollback must
    # restore the statistics' fused members and fusion depth with their
    # leaves, giving the code of a compile that never tiled them.
    config = {**THREADS, "cpp.loop_ordering_after_fusion": loop_ordering}
    from torch._inductor.choices import InductorChoices
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    import torch._inductor.codegen.cpp_fusion.scheduling.block_tiles as tiles

    original = InductorChoices.can_fuse_vertical

    def refuse_outer_fused(scheduler, node1, node2, shared_data_score):
        if isinstance(node1, OuterLoopFusedSchedulerNode) and len(node1.snodes) == 3:
            return False
        return original(scheduler, node1, node2, shared_data_score)

    monkeypatch.setattr(
        InductorChoices, "can_fuse_vertical", staticmethod(refuse_outer_fused)
    )
    x = torch.randn(4, 48, 32, 32)
    calls = []
    extended = tiles._extended_fusion_score

    def counted(*args):
        calls.append(extended(*args))
        return calls[-1]

    monkeypatch.setattr(tiles, "_extended_fusion_score", counted)
    tiled_then_refused = compile_shipped_and_inspect(fn, (x,), extra_config=config)
    assert any(score > 0 for score in calls)
    monkeypatch.setattr(tiles, "_fused_statistics_depth", lambda *args: None)
    never_tiled = compile_shipped_and_inspect(fn, (x,), extra_config=config)
    assert tiled_then_refused.kernels == never_tiled.kernels


def _accesses(write_index, read_index):
    """Write and read of one buffer over (n, tile index, c, lane) loops
    (4, 32, 3, 2048), split at the fused depth 2."""
    import sympy

    from torch._inductor.codegen.cpp_fusion.scheduling.block_fusion import BlockAccess

    n, t, c, lane = sympy.symbols("p0 p1 p2 p3", integer=True, nonnegative=True)
    ranges = {n: 4, t: 32, c: 3, lane: 2048}
    names = {"n": n, "t": t, "c": c, "lane": lane}
    return (
        BlockAccess(eval(write_index, {}, names), ranges, 2),
        BlockAccess(eval(read_index, {}, names), ranges, 2),
    )


WRITE = "196608*n + 2048*t + 65536*c + lane"


def test_a_read_of_any_channel_at_its_own_pixel_stays_in_the_tile():
    from torch._inductor.codegen.cpp_fusion.scheduling.block_tiles import (
        same_digit_block,
    )

    for read in ("196608*n + 2048*t + lane", "196608*n + 2048*t + 131072 + lane"):
        assert same_digit_block(*_accesses(WRITE, read)), read
    assert same_digit_block(*_accesses(WRITE, WRITE))


def test_a_read_past_the_tile_or_of_another_tile_is_refused():
    from torch._inductor.codegen.cpp_fusion.scheduling.block_tiles import (
        same_digit_block,
    )

    for read in (
        "196608*n + 2048*t + 65536*c + lane + 1",  # the next pixel
        "196608*n + 2048*t + 2*lane",  # every other pixel
        "196608*n + 1024*t + lane",  # another tile's pixels
        "196608*n + 2048*t + 65536*(c + 1) + lane",  # one channel too far
    ):
        assert not same_digit_block(*_accesses(WRITE, read)), read


def test_a_write_whose_tiles_overlap_is_refused():
    from torch._inductor.codegen.cpp_fusion.scheduling.block_tiles import (
        same_digit_block,
    )

    overlapping = "196608*n + 1024*t + 65536*c + lane"  # tiles of 2048 at 1024
    assert not same_digit_block(*_accesses(overlapping, overlapping))

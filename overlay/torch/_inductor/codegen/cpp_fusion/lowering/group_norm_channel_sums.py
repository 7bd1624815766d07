"""GroupNorm over channels-last memory: statistics per channel, then per group.

The core decomposition takes each group's mean and variance over a view
``(N, G, C/G, H*W)``.  Over channels-last memory a group's elements are
``C/G`` consecutive channels of every pixel, one pixel stride apart, so the
C++ kernel loads each pixel's short slice as a vector and a masked tail
(20 channels: two full AVX2 vectors and a masked one), in two passes (mean,
then squared deviations), through a stride the hardware prefetcher does not
follow.  ATen's channels-last kernel instead sums every pixel's channels as
full vectors into per-channel partial sums and combines a group's channels
afterwards.

The decomposition here does the same in ops Inductor fuses well:

1. per-channel sums over blocks of ``pixel_block`` consecutive pixels (a
   reduction over a short middle dim: the kernel walks one block's rows,
   which stay in cache, with full channel vectors), then over the blocks:
   each channel's mean;
2. the same for the squared deviations from each channel's own mean (a
   per-channel vector load, no group index in the pass over the input);
3. per group, Chan's combination of its channels' counts, means and sums
   of squared deviations: ``M2_g = sum_c M2_c + HW * sum_c (mean_c -
   mean_g)^2``.  Two passes and no cancellation, as the core's two-step
   variance;
4. per-channel scale and shift, stored as ``(N, C)`` rows as the core
   decomposition does, and the output ``x * scale + shift``.

The decomposition only sees the input's layout at trace time: a GroupNorm
whose input Inductor makes channels-last later (layout optimization around
convolutions) keeps the core decomposition.

Behind ``config.cpp.group_norm_channel_sums``.  ``decomposition.py``
decomposes ``aten.native_group_norm.default`` as the backend of the input's
device decides (``BaseScheduling.decompose``); ``CppScheduling``'s table
sends it to ``native_group_norm``, so the input is on the CPU under the C++
backend.  It falls back to the core decomposition when the flag is off, the
input is not channels-last, a size is
symbolic, the input is smaller than ``GROUP_NORM_CHANNEL_SUMS_MIN_BYTES``
(the two extra nests would cost more than they save), or no block size
divides the pixel count (see ``pixel_block``).
"""

from __future__ import annotations

import torch
from torch._inductor import config
from torch._prims_common import get_computation_dtype

from .. import costs
from ..costs import GROUP_NORM_MIN_PIXEL_BLOCK, GROUP_NORM_PIXEL_BLOCK


def pixel_block(pixels: int) -> int | None:
    """Pixels per block: all of them if few, else the largest divisor up to
    GROUP_NORM_PIXEL_BLOCK; None when that is under the minimum."""
    if pixels <= GROUP_NORM_PIXEL_BLOCK:
        return pixels
    block = max(d for d in range(1, GROUP_NORM_PIXEL_BLOCK + 1) if pixels % d == 0)
    return block if block >= GROUP_NORM_MIN_PIXEL_BLOCK else None


def _is_channels_last(x: torch.Tensor) -> bool:
    """4-D or 5-D channels-last, as ATen's GroupNorm keeps it, and not also
    contiguous (one pixel, or one channel)."""
    layout = torch.channels_last if x.ndim == 4 else torch.channels_last_3d
    return x.is_contiguous(memory_format=layout) and not x.is_contiguous()


def sums_per_channel(x: torch.Tensor) -> bool:
    """Whether this GroupNorm, which the C++ backend decomposes, takes
    statistics per channel: the flag is on, and the input is channels-last
    with static sizes, large enough to pay for the statistics' extra nests."""
    return bool(
        config.cpp.group_norm_channel_sums
        and x.ndim in (4, 5)
        and all(isinstance(size, int) for size in x.shape)
        and x.numel() > 0
        and x.numel() * x.element_size() >= costs.GROUP_NORM_CHANNEL_SUMS_MIN_BYTES
        and _is_channels_last(x)
        and pixel_block(x[0, 0].numel()) is not None
    )


def _pixel_rows(x: torch.Tensor) -> torch.Tensor:
    """(N, pixels, C): a view of channels-last memory."""
    n, c = x.shape[:2]
    return x.permute(0, *range(2, x.ndim), 1).reshape(n, -1, c)


def _channel_moments(rows: torch.Tensor, block: int):
    """Each channel's mean and sum of squared deviations over the pixels."""
    n, pixels, c = rows.shape
    blocks = rows.view(n, pixels // block, block, c)
    mean = blocks.sum(2).sum(1) / pixels
    deviation = blocks - mean[:, None, None, :]
    return mean, (deviation * deviation).sum(2).sum(1)


def _group_moments(mean_c, m2_c, groups: int, pixels: int):
    """Chan's combination of equal-count channels into their groups."""
    n, c = mean_c.shape
    mean_c = mean_c.view(n, groups, c // groups)
    mean_g = mean_c.mean(-1)
    spread = mean_c - mean_g[:, :, None]
    within = m2_c.view(n, groups, c // groups).sum(-1)
    between = pixels * (spread * spread).sum(-1)
    return mean_g, (within + between) / (pixels * (c // groups))


def _rows(t: torch.Tensor, n: int, c: int) -> torch.Tensor:
    # A stored (N, C) buffer, as the core decomposition makes its scale and
    # shift: read by channel index in the output loop, whose channel loop
    # then stays one contiguous loop.
    return t.contiguous().as_strided([n, c], [c, 1])


def native_group_norm(core, input, weight, bias, batch, channels, inner, groups, eps):
    """``aten.native_group_norm``'s (out, mean, rstd); ``core`` is the core
    decomposition, which also reports the errors of bad arguments."""
    if channels % groups or not sums_per_channel(input):
        return core(input, weight, bias, batch, channels, inner, groups, eps)
    x = input.to(get_computation_dtype(input.dtype))
    pixels = inner
    block = pixel_block(pixels)
    assert block is not None  # sums_per_channel checked it
    mean_c, m2_c = _channel_moments(_pixel_rows(x), block)
    mean, var = _group_moments(mean_c, m2_c, groups, pixels)
    rstd = torch.rsqrt(var + eps)
    cpg = channels // groups
    scale = rstd[:, :, None].expand(batch, groups, cpg)
    if weight is not None:
        scale = scale * weight.view(1, groups, cpg)
    shift = -mean[:, :, None] * scale
    if bias is not None:
        shift = shift + bias.view(1, groups, cpg)
    broadcast = (slice(None), slice(None)) + (None,) * (input.ndim - 2)
    scale = _rows(scale, batch, channels)[broadcast]
    shift = _rows(shift, batch, channels)[broadcast]
    out = x * scale + shift
    return out.to(input.dtype), mean.to(input.dtype), rstd.to(input.dtype)

"""A producer joins an element-wise outer-loop fusion in front, block by block.

GroupNorm over groups of at most ``config.unroll_reductions_threshold``
elements lowers to pointwise kernels fused over the group loop.  A reused erf
or exp before it is stored by a kernel of its own, whose output the
statistics read a group at a time.  cpp_fusion/scheduling/block_prepend.py lets that
kernel join the fusion in front (splitting its merged loop into the groups
and the rest where needed); if the members then fail to merge, the producer
is generated alone and the rest stays fused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from compile_utils import compile_shipped_and_inspect, vector_lanes
from torch.testing import FileCheck

import torch._inductor.codegen.cpp_fusion.scheduling.block_prepend as prepend
from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

THREADS = {"cpp.threads": 2}
OFF = {**THREADS, "cpp.outer_block_prepend": False}
# erf and a store as the kernels print them: vector methods, or scalar code
ERF = ".erf()" if vector_lanes() else "std::erf("
STORE = ".store(" if vector_lanes() else "] = tmp"


def setup_module():
    torch.manual_seed(0)


def erf_group_norm(x, w, b):
    return F.group_norm(torch.erf(x), 4, w, b, eps=1e-5)


def exp_group_norm(x, w, b):
    return F.group_norm(torch.exp(x), 4, w, b, eps=1e-5)


def _args(n: int, c: int, length: int):
    return torch.randn(n, c, length), torch.randn(c), torch.randn(c)


def _loop(extent: int) -> str:
    return f"<static_cast<int64_t>({extent}L);"


def test_one_channel_groups_are_one_nest_over_the_groups():
    # (1, 4, 4) in 4 groups of 4 elements: the statistics are unrolled.
    args = _args(1, 4, 4)
    stock = compile_shipped_and_inspect(
        erf_group_norm, args, overlay=False, extra_config=THREADS
    )
    off = compile_shipped_and_inspect(erf_group_norm, args, extra_config=OFF)
    patched = compile_shipped_and_inspect(erf_group_norm, args, extra_config=THREADS)
    # stock inlines erf (one nest); storing it once costs a nest unless it
    # joins the fusion over the groups
    assert (stock.nests, off.nests, patched.nests) == ([1], [2], [1])
    (kernel,) = patched.kernels
    # the group loop, then erf over the group's 4 elements inside it
    FileCheck().check(_loop(4)).check(_loop(4)).check(ERF).check("1 / std::sqrt").run(
        kernel
    )


def test_a_merged_loop_is_split_into_the_groups():
    # (1, 8, 2) in 4 groups of two channels: erf's loops merge to 16, which
    # is split into the 4 groups of 4 to join the statistics' group loop.
    args = _args(1, 8, 2)
    off = compile_shipped_and_inspect(erf_group_norm, args, extra_config=OFF)
    patched = compile_shipped_and_inspect(erf_group_norm, args, extra_config=THREADS)
    assert (off.total_nests, patched.total_nests) == (3, 2)
    FileCheck().check(_loop(4)).check(ERF).check("1 / std::sqrt").run(
        patched.kernels[0]
    )


def erf_group_norm_and_scaled(x, w, b):
    return F.group_norm(torch.erf(x), 4, w, b, eps=1e-5), torch.erf(x) * 3


def test_a_fused_producer_is_split_when_its_members_merge():
    # erf and erf * 3 fuse (one read of x); their loops merge to 16 and
    # split into the 4 groups of 4 (0020 off: erf and the product apart)
    args = _args(1, 8, 2)
    off = compile_shipped_and_inspect(erf_group_norm_and_scaled, args, extra_config=OFF)
    patched = compile_shipped_and_inspect(
        erf_group_norm_and_scaled, args, extra_config=THREADS
    )
    assert (off.total_nests, patched.total_nests) == (3, 2)


def skip_block(a, b, c, d, e, w, bias, conv):
    # a UNet block on channels-last maps: the residual sum r, recomputed
    # where it is read, feeds the block's GroupNorm (through h) and the skip
    # concat; the convolution makes the concat's other half come last
    r = a + b + c
    h = r + d + e
    g = F.silu(F.group_norm(h, 8, w, bias, eps=1e-5))
    return torch.cat([h + F.conv2d(g, conv), r], dim=1)


def test_a_fused_producer_whose_members_merge_apart_is_not_split():
    # h's store and r's store into the concat (every other 64 channels of
    # 128) fuse; h's loops merge to one, the concat slice's keep two.  A
    # split of both over the statistics' (N, groups) failed to index the
    # slice (the SD UNet did not compile): the producer stays apart.
    channels_last = [
        torch.randn(2, 64, 4, 4).contiguous(memory_format=torch.channels_last)
        for _ in range(5)
    ]
    conv = torch.randn(64, 64, 1, 1).contiguous(memory_format=torch.channels_last)
    args = (*channels_last, torch.randn(64), torch.randn(64), conv)
    with torch.no_grad():
        stock = compile_shipped_and_inspect(
            skip_block, args, overlay=False, extra_config=THREADS
        )
        patched = compile_shipped_and_inspect(skip_block, args, extra_config=THREADS)
    assert patched.total_nests <= stock.total_nests


def erf_group_norm_relu(x, w, b):
    return F.relu(F.group_norm(torch.erf(x), 3, w, b, eps=1e-5))


def test_a_stored_producer_is_reindexed_onto_the_statistics_loops():
    # (1, 6, 682) in 3 groups: erf over (6, 682) shares no dep, as indexed,
    # with the statistics over (3 | 1364), so stock's reindexing never sees
    # the pair; reindexed, erf runs inside the statistics' loop (as inlined
    # with the flags off) and is stored there
    args = _args(1, 6, 682)
    stock = compile_shipped_and_inspect(
        erf_group_norm_relu, args, overlay=False, extra_config=THREADS
    )
    off = compile_shipped_and_inspect(erf_group_norm_relu, args, extra_config=OFF)
    patched = compile_shipped_and_inspect(
        erf_group_norm_relu, args, extra_config=THREADS
    )
    assert (stock.total_nests, off.total_nests, patched.total_nests) == (3, 4, 3)
    # the first nest computes erf, stores it and reduces it, over 3 x 1364
    FileCheck().check(_loop(3)).check(_loop(1364)).check(ERF).check(STORE).check(
        "welford_combine"
    ).run(patched.kernels[0])


def test_stocks_own_stored_exp_joins_too():
    # exp is on stock's own list of ops stored when reused
    args = _args(1, 4, 4)
    stock = compile_shipped_and_inspect(
        exp_group_norm, args, overlay=False, extra_config=THREADS
    )
    patched = compile_shipped_and_inspect(exp_group_norm, args, extra_config=THREADS)
    assert (stock.nests, patched.nests) == ([2], [1])


_LEVEL_CHECK = OuterLoopFusedSchedulerNode.check_outer_fusion_loop_level_attr


def _refuse_prepended(self, proxies, depth):
    """The loop-level check, failing every merge with a prepended member."""
    if prepend._prepended(list(self.get_outer_nodes())):
        return False
    return _LEVEL_CHECK(self, proxies, depth)


# Without 0002's re-tiling and 0018's shallower depths, the only attempts
# left after stock's are the fallbacks under test.
NO_RETRIES = {
    **THREADS,
    "cpp.outer_loop_fusion_retile": False,
    "cpp.outer_loop_shallower_fusion": False,
}


def test_a_failed_merge_keeps_the_rest_fused(monkeypatch):
    monkeypatch.setattr(
        OuterLoopFusedSchedulerNode,
        "check_outer_fusion_loop_level_attr",
        _refuse_prepended,
    )
    patched = compile_shipped_and_inspect(
        erf_group_norm, _args(1, 4, 4), extra_config=NO_RETRIES
    )
    # erf alone, then the statistics and the normalization over the groups
    assert patched.nests == [2]
    assert patched.outer_fused == 1


def test_without_the_rollback_a_failed_merge_unfuses_every_member(monkeypatch):
    monkeypatch.setattr(
        OuterLoopFusedSchedulerNode,
        "check_outer_fusion_loop_level_attr",
        _refuse_prepended,
    )
    monkeypatch.setattr(
        prepend, "codegen_without_prepended_member", lambda scheduling, node: False
    )
    patched = compile_shipped_and_inspect(
        erf_group_norm, _args(1, 4, 4), extra_config=NO_RETRIES
    )
    assert patched.nests == [3]


def test_prepend_is_tried_after_shallower_merges_and_before_regrouping():
    from torch._inductor.codegen.cpp import CppScheduling

    fallbacks = CppScheduling.outer_loop_fallbacks(None)
    assert [f.name for f in fallbacks] == ["retile", "shallower", "prepend", "regroup"]
    assert [f.flag for f in fallbacks] == [
        "outer_loop_fusion_retile",
        "outer_loop_shallower_fusion",
        "outer_block_prepend",
        "outer_loop_regroup",
    ]

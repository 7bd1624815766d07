"""Loop ordering after fusion on the C++ backend (cpp.loop_ordering_after_fusion).

The flag keeps CPU loops unmerged until fusion, lets the scheduler reorder and
reindex CPU loops to match fusion partners, and merges loops afterwards.  The
tests check three things: the merge no longer breaks C++ codegen (the crash
that made upstream skip CPU), results agree with eager and never need more
loop nests than with the flag off, and the cost guard rolls back reorders
that would make the innermost loop strided.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.testing import FileCheck

import torch._inductor.codegen.cpp_fusion.scheduling.loop_ordering as cpp_loop_ordering
from torch._inductor import config, metrics
from torch._inductor.scheduler import Scheduler, SchedulerNode
from torch._inductor.test_operators import realize

from compile_utils import (
    compile_and_inspect,
    requires_vectors,
    SEED_CONFIG,
    SHIPPED_DEFAULTS,
    vector_lanes,
)

# Loop ordering after fusion without the outer-loop features (0002-0004,
# 0006, 0007, 0009, 0011, 0012), whose decisions it would otherwise mix with.
LOOP_ORDERING_ONLY = {
    key: value
    for key, value in {
    "cpp.outer_loop_fusion_retile": False,
    "cpp.outer_loop_split": False,
    "cpp.two_step_variance_in_cache": False,
    "cpp.outer_loop_local_buffer_check": False,
    "cpp.realize_reused_erf": False,
    "cpp.outer_loop_regroup": False,
    "cpp.outer_block_fusion": False,
    "cpp.block_local_buffers": False,
    "cpp.outer_reduction_blocks": False,
}.items()
    # a release whose stock has 0006's fix has no flag for it
    if hasattr(config.cpp, key.removeprefix("cpp."))
}
# The overlay as shipped, but reductions over dim 0 in one level: 0023 splits
# them into blocks of rows (test_outer_reduction_blocks.py), which changes
# the kernels whatever loop ordering decides.
SHIPPED_ONE_LEVEL = {**SHIPPED_DEFAULTS, "cpp.outer_reduction_blocks": False}


def channels_last_layernorm():
    ln = torch.nn.LayerNorm(32)
    return (
        lambda x: ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2),
        (torch.randn(2, 32, 6, 7),),
    )


def layernorm_3d():
    return torch.nn.LayerNorm(64), (torch.randn(2, 7, 64),)


def seed_groupnorm():
    return torch.nn.GroupNorm(2, 16), (torch.randn(2, 16, 8, 8),)


def add_relu_and_spatial_sum():
    x = torch.randn(2, 16, 8, 8).to(memory_format=torch.channels_last)
    return (lambda x, y: ((x + y).relu().contiguous(), (x * y).sum((2, 3)))), (
        x,
        torch.randn(2, 16, 8, 8),
    )


def middle_dim_sum():
    return (lambda x: (x * 2).sum(1) + 1), (torch.randn(4, 24, 40),)


def log_softmax_middle_dim():
    return (lambda x: torch.log_softmax(x, 1)), (torch.randn(4, 24, 16),)


def avg_pool_channels_last():
    x = torch.randn(2, 16, 9, 9).to(memory_format=torch.channels_last)
    return (lambda x: F.relu(F.avg_pool2d(x, 3, 1, 1)) * 2 + 1), (x,)


# Every one of these crashes C++ codegen when the loops of fused members are
# merged one by one (see test_member_by_member_merge_breaks_codegen).
PROGRAMS = [
    channels_last_layernorm,
    layernorm_3d,
    seed_groupnorm,
    add_relu_and_spatial_sum,
    middle_dim_sum,
    log_softmax_middle_dim,
    avg_pool_channels_last,
]


@pytest.mark.parametrize("make", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("cfg", [{}, SEED_CONFIG], ids=["default", "seed_config"])
def test_matches_eager_and_never_adds_loop_nests(make, cfg):
    fn, args = make()
    off = compile_and_inspect(fn, args, overlay=False, extra_config=cfg)
    on = compile_and_inspect(fn, args, extra_config={**LOOP_ORDERING_ONLY, **cfg})
    assert on.total_nests <= off.total_nests


def test_member_by_member_merge_breaks_codegen(monkeypatch):
    # What upstream would do for CPU: merge each member's loops on its own.
    # The members of a fused node then disagree on their loop groups.
    def merge_each_member(node):
        for snode in node.get_nodes():
            if isinstance(snode, SchedulerNode):
                snode.merge_loops()

    monkeypatch.setattr(
        cpp_loop_ordering, "merge_loops_consistently", merge_each_member
    )
    fn, args = layernorm_3d()
    with pytest.raises(Exception, match="AssertionError"):
        compile_and_inspect(fn, args, extra_config=LOOP_ORDERING_ONLY)


def test_fused_members_that_merge_apart_merge_together():
    # log_softmax over channels: the statistics (max, sum of exps) and the
    # log of the sum are fused over (N, H, W).  Merged one by one, the log
    # flattens all three loops while the reductions keep N apart (their
    # index has the channel between N and the pixels), so they disagree;
    # merged over the indices of all three, each loops over (N, H*W), and
    # no row of W = 56 pixels ends in a masked vector tail.
    fn = lambda x: torch.log_softmax(x, 1)  # noqa: E731
    args = (torch.randn(2, 64, 56, 56),)
    on = compile_and_inspect(
        fn, args, extra_config={**SHIPPED_ONE_LEVEL, "cpp.threads": 2}
    )
    assert on.nests == [2]

    def loop(extent):
        return f"<static_cast<int64_t>({extent}L);"

    FileCheck().check(loop(2)).check(loop(56 * 56)).check(loop(64)).check_not(
        loop(56)
    ).run(on.kernels[0])


def test_both_flags_compose_bfloat16():
    fn, args = channels_last_layernorm()
    args = tuple(a.bfloat16() for a in args)
    on = compile_and_inspect(fn, args)
    assert on.nests == [1]


def test_dynamic_shapes():
    fn, args = middle_dim_sum()
    on = compile_and_inspect(fn, args, dynamic=True, extra_config=LOOP_ORDERING_ONLY)
    off = compile_and_inspect(fn, args, dynamic=True, overlay=False)
    assert on.total_nests <= off.total_nests


@pytest.mark.parametrize(
    "cfg",
    [LOOP_ORDERING_ONLY, SHIPPED_ONE_LEVEL],
    ids=["loop_ordering_only", "shipped_one_level"],
)
def test_reorder_that_strides_the_inner_loop_is_rolled_back(cfg):
    # Fusing softmax over dim 0 would need the output loop to run down the
    # columns: a strided store for every element of a 2 MiB output, more
    # than a core's cache holds, where stock's pointwise nests walk rows.
    # No strided walk of stock's goes away in exchange: the exp buffer stays
    # (the last pass reads it row by row in stock).  The cost guard refuses.
    fn = lambda x: torch.softmax(x, 0)  # noqa: E731
    args = (torch.randn(512, 1024),)
    on = compile_and_inspect(fn, args, extra_config=cfg)
    off = compile_and_inspect(fn, args, overlay=False)
    assert on.reordered == 0
    assert on.kernels == off.kernels


def test_reorder_cost_guard_leaves_the_nodes_untouched(monkeypatch):
    # The guard measures the new order on reordered copies of the loop
    # bodies: whatever it answers, the nodes keep their body, sizes, group
    # and deps (a reorder it accepts is applied by the scheduler afterwards).
    guard = cpp_loop_ordering.reorder_is_worthwhile
    answers = []

    def checked_guard(node, new_order):
        # Every node: the guard also reads the partner a fusion would join.
        snodes = [
            sn
            for group in node.scheduler.nodes
            for sn in group.get_nodes()
            if isinstance(sn, SchedulerNode)
        ]
        before = [sn.snapshot_loop_state() for sn in snodes]
        answer = guard(node, new_order)
        after = [sn.snapshot_loop_state() for sn in snodes]
        assert all(map(_same_objects, before, after))
        answers.append(answer)
        return answer

    monkeypatch.setattr(cpp_loop_ordering, "reorder_is_worthwhile", checked_guard)
    softmax_dim0 = lambda x: torch.softmax(x, 0)  # noqa: E731
    compile_and_inspect(
        softmax_dim0, (torch.randn(512, 1024),), extra_config=LOOP_ORDERING_ONLY
    )
    compile_and_inspect(
        lambda x: realize(x + 1).sum(dim=[0, 1]),
        (torch.randn(2, 4, 512),),
        extra_config=LOOP_ORDERING_ONLY,
    )
    compile_and_inspect(apbt, transposed_operands(), extra_config=LOOP_ORDERING_ONLY)
    assert False in answers and True in answers


def _same_objects(state1, state2) -> bool:
    return all(a is b for a, b in zip(state1, state2))


def apbt(x, y):
    return realize(x * 2) + realize(y * 3)


def transposed_operands():
    # 2 MiB each: strided walks over them are counted.
    return torch.randn(512, 1024), torch.randn(1024, 512).t()


def test_reorder_onto_a_strided_walk_stock_makes_is_applied():
    # Stock's second nest reads y * 3 (written in y's order) through
    # transposed tiles.  Reordered, the first node strides over y instead,
    # and fusing it with its one consumer removes y * 3: the strided bytes
    # stay those of stock.
    on = compile_and_inspect(
        apbt, transposed_operands(), extra_config=LOOP_ORDERING_ONLY
    )
    assert (on.reordered, on.total_nests) == (1, 1)


def test_reorder_onto_a_strided_walk_of_a_kept_buffer_is_rolled_back(monkeypatch):
    # Where the fusion cannot remove y * 3 (another reader, a mutation), the
    # fused nest would write it, now with a stride, on top of the strided
    # walk over y: the reorder is refused.
    monkeypatch.setattr(
        Scheduler, "can_buffer_be_removed_through_fusion", lambda *args: False
    )
    on = compile_and_inspect(
        apbt, transposed_operands(), extra_config=LOOP_ORDERING_ONLY
    )
    assert (on.reordered, on.total_nests) == (0, 2)


def test_reorder_that_strides_a_cached_buffer_is_applied():
    # The same strided walk over a buffer that stays in cache moves no extra
    # memory: upstream's test_pw_outer_red, x + 1 then a sum over the two
    # outer dims, becomes one loop vectorized along the kept dim.
    def pw_outer_red(x):
        return realize(x + 1).sum(dim=[0, 1])

    args = (torch.randn(2, 4, 512),)
    on = compile_and_inspect(pw_outer_red, args, extra_config=LOOP_ORDERING_ONLY)
    off = compile_and_inspect(pw_outer_red, args, overlay=False)
    assert on.reordered == 1
    assert (on.total_nests, off.total_nests) == (1, 2)


def test_reorder_that_keeps_strided_traffic_is_applied():
    # a = x.t() * 2 reads x strided in one order and writes a strided in the
    # other: the reorder toward the column reduction costs nothing, so it is
    # taken (and the C++ group follows the new order).
    def transpose_then_center(x):
        a = x.t().contiguous() * 2
        return a + a.sum(0, keepdim=True)

    on = compile_and_inspect(
        transpose_then_center, (torch.randn(32, 48),), extra_config=LOOP_ORDERING_ONLY
    )
    assert on.reordered == 1


# GroupNorm's statistics merge batch and group into one loop, its affine step
# cannot (the weight is indexed by channel alone): merging whole members of
# their outer-loop fusion fails.  The loops below the fused levels must still
# merge, or the C++ backend sees the statistics' first inner loop (channels
# per group) as their whole extent.


def test_large_group_statistics_stay_one_parallel_reduction():
    # Unmerged, the first inner loop (32 channels) looks short enough to fuse
    # over the 4 outer iterations; merged, it is 32768 elements and stock's
    # rule keeps it a parallel reduction of its own, as with the flag off.
    fn, args = torch.nn.GroupNorm(2, 64), (torch.randn(2, 64, 32, 32),)
    # a parallel reduction needs threads to share it
    two_threads = {**LOOP_ORDERING_ONLY, "cpp.threads": 2}
    on = compile_and_inspect(fn, args, extra_config=two_threads)
    assert on.outer_fused == 0
    assert metrics.parallel_reduction_count == 1


@requires_vectors
def test_affine_step_of_small_groups_stays_vectorized():
    # Unmerged, the affine step's innermost loop is the image width (6), too
    # short for the 32 lanes of a bfloat16 input: it went scalar.
    fn = torch.nn.GroupNorm(3, 90)  # float32 parameters, as upstream tests it
    args = (torch.randn(2, 90, 6, 6, dtype=torch.bfloat16),)
    on = compile_and_inspect(fn, args)  # both flags
    assert on.outer_fused == 1
    # the affine step's inner loop over the 6 x 6 image, one bfloat16 vector
    # per step (32 lanes on AVX512, 16 on AVX2)
    affine_loop = re.compile(
        r"x\d+<static_cast<int64_t>\(36L\); x\d+\+=static_cast<int64_t>\((\d+)L\)"
    )
    assert affine_loop.findall(on.code) == [str(vector_lanes(torch.bfloat16))]


def test_an_outer_loop_fusion_keeps_its_depth_when_a_partner_asks_a_merge(monkeypatch):
    # Statistics over (N, G | H, W), fused with their consumers over (N, G),
    # then asked to fuse with a partner that reads them through a view of
    # (N * G, 1): merging the fused node's members for that partner would
    # leave its depth at 2 over members of one loop, and every fusion
    # decision after it would read that depth.
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    def program(x0, x1):
        m = x0.mean(dim=(2, 3), keepdim=True)
        v1 = x0 - m
        s = (v1 * v1).mean(dim=(2, 3), keepdim=True)
        return v1 * torch.rsqrt(s + 1e-5), x1 * s.view(8, 1)

    seen = []

    def record(node):
        if isinstance(node, OuterLoopFusedSchedulerNode):
            loops = [len(sn.loop_body.sizes[0]) for sn in node.get_nodes()]
            seen.append((node.outer_loop_fusion_depth, min(loops)))
        return merge(node)

    merge = cpp_loop_ordering.merge_loops_consistently
    monkeypatch.setattr(cpp_loop_ordering, "merge_loops_consistently", record)
    args = (torch.randn(2, 4, 4, 64), torch.randn(8, 256))
    compile_and_inspect(
        program, args, extra_config={**SEED_CONFIG, "cpp.outer_loop_split": False}
    )
    assert seen, "no outer-loop fusion"
    assert all(depth <= loops for depth, loops in seen), seen


def test_reorder_rounds_stop_at_their_cap(monkeypatch):
    # softmax over dim 0 of a scaled input: upstream's one reorder round
    # fuses part of it, a second round the rest, into one nest.  With the
    # cap at upstream's one round the chain stops where upstream's does.
    def program(x, scale):
        return torch.softmax(x * scale, 0)

    args = (torch.randn(64, 48), torch.tensor([1.3]))
    fused_by_reorder = []  # node counts before and after each reorder round
    fuse_nodes_once = Scheduler.fuse_nodes_once

    def counted(self, nodes, is_reorder_round=False):
        after = fuse_nodes_once(self, nodes, is_reorder_round=is_reorder_round)
        if is_reorder_round:
            fused_by_reorder.append((len(nodes), len(after)))
        return after

    monkeypatch.setattr(Scheduler, "fuse_nodes_once", counted)
    repeated = compile_and_inspect(program, args, extra_config=SHIPPED_ONE_LEVEL)
    assert repeated.nests == [1]
    assert len([1 for before, after in fused_by_reorder if after < before]) == 2
    monkeypatch.setattr(cpp_loop_ordering, "MAX_REORDER_ROUNDS", 1)
    fused_by_reorder.clear()
    capped = compile_and_inspect(program, args, extra_config=SHIPPED_ONE_LEVEL)
    assert len(fused_by_reorder) == 1  # upstream's round alone
    assert capped.nests == [3]

"""0005's early refusal of a reindexing, from the dependencies alone.

``reindexed_affine.cannot_share`` says that a pointwise node reindexed onto a
reduction's loops could share no dependency with it, without building the
reindexed loop bodies.  It must only say so where the probe it precedes
(``loop_ordering._reindexed_deps``, then ``Scheduler.deps_match_normalized``)
would refuse too.  The deps below are those of the programs named.
"""

from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F
from torch._inductor.codegen.cpp_fusion.scheduling import loop_ordering
from torch._inductor.codegen.cpp_fusion.scheduling.reindexed_affine import cannot_share
from torch._inductor.dependencies import MemoryDep, ReadWrites
from torch.utils._ordered_set import OrderedSet

from compile_utils import compile_shipped_and_inspect, recording, run_independent

d = sympy.symbols("d0:5", integer=True, nonnegative=True)


def reads(*deps) -> ReadWrites:
    return ReadWrites(OrderedSet(deps), OrderedSet(), OrderedSet())


def dep(name, index, *sizes) -> MemoryDep:
    return MemoryDep(name, index, d[: len(sizes)], tuple(map(sympy.Integer, sizes)))


# log_softmax over dim 1 of (2, 48, 32, 32): the exponentials read the
# per-pixel statistics over (2, 48, 32, 32), the reduction's loops are
# (2, 3, 32, 32 | 16).  The statistics' run of 1024 pixels ends inside the
# new loop of 32 * 16 = 512: floor and modulo of the new variables.
STATISTICS = dep("buf1", 1024 * d[0] + 32 * d[2] + d[3], 2, 48, 32, 32)
STATISTICS_OF_REDUCTION = dep("buf1", 1024 * d[0] + 32 * d[2] + d[3], 2, 3, 32, 32)
TARGET = [2, 3, 32, 32, 16]


def test_a_run_that_straddles_a_new_loop_cannot_share():
    assert cannot_share(reads(STATISTICS), reads(STATISTICS_OF_REDUCTION), TARGET)


def test_a_contiguous_run_maps_onto_the_new_loops_and_is_left_to_the_probe():
    # the input, read whole in both orders: affine over the new loops too
    whole = dep("arg0", 49152 * d[0] + 1024 * d[1] + 32 * d[2] + d[3], 2, 48, 32, 32)
    other_index = 49152 * d[0] + 16384 * d[1] + 32 * d[2] + d[3] + 1024 * d[4]
    other = dep("arg0", other_index, *TARGET)
    assert not cannot_share(reads(whole), reads(other), TARGET)
    # one buffer the probe must see is enough to ask it
    assert not cannot_share(
        reads(STATISTICS, whole), reads(STATISTICS_OF_REDUCTION, other), TARGET
    )


def test_channels_last_group_norm_is_left_to_the_probe():
    # (2, 64, 8, 8) channels last, 8 groups: the normalization's (2, 8, 8, 64)
    # onto the statistics' (2, 8, 64 | 8); the probe finds them sharing.
    norm = dep("x", 4096 * d[0] + 512 * d[1] + 64 * d[2] + d[3], 2, 8, 8, 64)
    stats = dep("x", 4096 * d[0] + 8 * d[1] + 64 * d[2] + d[3], 2, 8, 64, 8)
    assert not cannot_share(reads(norm), reads(stats), [2, 8, 64, 8])


def test_uncertain_cases_are_left_to_the_probe():
    modular = dep("buf1", sympy.Mod(d[3], 7) + 1024 * d[0], 2, 48, 32, 32)
    assert not cannot_share(reads(modular), reads(STATISTICS_OF_REDUCTION), TARGET)
    floor_in_reduction = dep("buf1", sympy.floor(d[3] / 2), 2, 3, 32, 32)
    assert not cannot_share(reads(STATISTICS), reads(floor_in_reduction), TARGET)
    symbolic = [2, 3, 32, sympy.Symbol("s0", positive=True, integer=True), 16]
    assert not cannot_share(reads(STATISTICS), reads(STATISTICS_OF_REDUCTION), symbolic)
    fewer_iterations = dep("buf1", 1024 * d[0] + d[3], 2, 1, 32, 32)
    theirs = reads(STATISTICS_OF_REDUCTION)
    assert not cannot_share(reads(fewer_iterations), theirs, TARGET)


def test_no_buffer_in_common_cannot_share():
    assert cannot_share(reads(STATISTICS), reads(dep("other", d[0], 2)), TARGET)


def _two_group_norms(x, w1, b1, w2, b2):
    # found by the fuzzer, over a transposed input: the first norm's output,
    # reindexed onto the second norm's statistics loops, reads the first
    # statistics across a new loop
    return F.group_norm(F.group_norm(x, 2, w1, b1), 2, w2, b2)


def _args():
    torch.manual_seed(0)
    return (torch.randn(32, 32).t(), *(torch.randn(32) for _ in range(4)))


def test_refused_from_the_deps_where_the_probe_refuses(monkeypatch):
    asked: list[bool] = []
    real_cannot, real_share = (
        loop_ordering.reindexed_affine.cannot_share,
        loop_ordering._share_a_dependency,
    )

    def cannot(*args):
        asked.append(real_cannot(*args))
        return False  # build the reindexed bodies anyway

    def share(*args):
        shared = real_share(*args)
        assert not (shared and asked[-1]), "refused a reindexing the probe accepts"
        return shared

    monkeypatch.setattr(loop_ordering.reindexed_affine, "cannot_share", cannot)
    monkeypatch.setattr(loop_ordering, "_share_a_dependency", share)
    compile_shipped_and_inspect(_two_group_norms, _args())
    assert any(asked)


def test_an_early_refusal_builds_no_body_and_changes_no_code(monkeypatch):
    built: list = []
    real = loop_ordering._reindexed_deps
    monkeypatch.setattr(loop_ordering, "_reindexed_deps", recording(real, built))
    early = compile_shipped_and_inspect(_two_group_norms, _args())
    refused_early = len(built)
    monkeypatch.setattr(
        loop_ordering.reindexed_affine, "cannot_share", lambda *args: False
    )
    built.clear()
    late = compile_shipped_and_inspect(_two_group_norms, _args())
    assert len(built) > refused_early
    assert run_independent(late.code) == run_independent(early.code)

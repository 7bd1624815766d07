"""Which overlay feature changed a program's kernels: counted at the decision.

Every feature has one decision function in its overlay module whose outcome
says "this kernel is not stock's": the re-tile accepted, the split applied,
the Welford threshold raised, the accumulators multiplied, the loads hoisted,
and so on.  ``install()`` wraps those functions (the patched upstream files
import them lazily, inside the hooks, so a wrapped module attribute is what
they call) and counts the calls whose outcome changed the kernel; loop
ordering after fusion also reads stock's ``metrics.num_loop_reordering``.
Nothing in the overlay is edited: the counts are the fuzzer's own.

``REACH`` lists the features in patch order; the fuzz summary reports, per
feature, how many programs it changed.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Decision:
    feature: str  # the patch number, "0002" ...
    title: str
    module: str  # under torch._inductor
    function: str  # "name" or "Class.method"
    changed: Callable[[tuple, Any], bool]  # (call args, result) -> kernel changed


def _block_fused(args, result) -> bool:
    from torch._inductor.codegen.cpp_fusion.scheduling.block_fusion import (
        is_outer_block_fusion,
    )

    return bool(is_outer_block_fusion(args[0]))


ALL_REACH = (
    Decision(
        "0002",
        "re-tile",
        "codegen.cpp_fusion.outer_loop.retile",
        "OuterLoopRetile.accepts",
        # a merge at a shallower depth (0018's subclass) is 0018's
        lambda a, r: bool(r) and type(a[0]).__name__ == "OuterLoopRetile",
    ),
    Decision(
        "0003",
        "split",
        "codegen.cpp_fusion.outer_loop.split",
        "_apply_split",
        lambda a, r: True,
    ),
    Decision(
        "0004",
        "two-step variance",
        "codegen.cpp_fusion.costs",
        "two_step_variance_threshold",
        lambda a, r: r > a[0],
    ),
    Decision(
        "0005",
        "loop order after fusion (reindex)",
        "codegen.cpp_fusion.scheduling.loop_ordering",
        "try_reindex_pointwise_for_reduction",
        lambda a, r: bool(r),
    ),
    Decision(
        "0005",
        "loop order after fusion (members merged together)",
        "codegen.cpp_fusion.scheduling.loop_ordering",
        "_merge_members_together",
        lambda a, r: bool(r),
    ),
    Decision(
        "0006",
        "local buffer under tiled outer level",
        "codegen.cpp_fusion.outer_loop.retile",
        "tiles_a_fused_outer_level",
        lambda a, r: bool(r),
    ),
    Decision(
        "0007",
        "erf realized",
        "codegen.cpp_fusion.costs",
        "expensive_to_recompute",
        lambda a, r: bool(r),
    ),
    Decision(
        "0008",
        "accumulators",
        "codegen.cpp_fusion.emitters.accumulators",
        "accumulator_count",
        lambda a, r: r > 1,
    ),
    Decision(
        "0009",
        "outer-block fusion",
        "codegen.cpp_fusion.outer_loop.block_local_buffers",
        "block_local_buffers",
        _block_fused,
    ),
    Decision(
        "0010",
        "invariant loads",
        "codegen.cpp_fusion.emitters.invariant_loads",
        "_plan",
        lambda a, r: bool(r),
    ),
    Decision(
        "0011",
        "block local buffers",
        "codegen.cpp_fusion.outer_loop.block_local_buffers",
        "block_local_buffers",
        lambda a, r: bool(r),
    ),
    Decision(
        "0012",
        "regroup",
        "codegen.cpp_fusion.outer_loop.regroup",
        "codegen_without_last_member",
        lambda a, r: bool(r),
    ),
    Decision(
        "0013",
        "streaming stores",
        "codegen.cpp_fusion.emitters.streaming_stores",
        "plan_streaming",
        lambda a, r: bool(r),
    ),
    Decision(
        "0014",
        "prefetch",
        "codegen.cpp_fusion.emitters.prefetch",
        "_plan",
        lambda a, r: bool(r),
    ),
    Decision(
        "0015",
        "fusion rules for open loops (reduction first)",
        "codegen.cpp_fusion.scheduling.loop_ordering",
        "reduction_first_compatible",
        lambda a, r: bool(r),
    ),
    Decision(
        "0015",
        "fusion rules for open loops (loops merged)",
        "codegen.cpp_fusion.scheduling.loop_ordering",
        "merge_loops_to_fuse",
        lambda a, r: bool(r),
    ),
    Decision(
        "0017",
        "unrolled rotation",
        "codegen.cpp_fusion.emitters.accumulators",
        "unroll_rotated_loop",
        lambda a, r: len(r) != len(a[0]),
    ),
    Decision(
        "0018",
        "shallower merge",
        "codegen.cpp_fusion.outer_loop.shallower",
        "ShallowerFusion.accepts",
        lambda a, r: bool(r),
    ),
    Decision(
        "0019",
        "outer-block tiles",
        "codegen.cpp_fusion.scheduling.block_tiles",
        "tiled_block_fusion_score",
        lambda a, r: r > 0,
    ),
    Decision(
        "0019",
        "outer-block tiles (statistics joined)",
        "codegen.cpp_fusion.scheduling.block_tiles",
        "_extended_fusion_score",
        lambda a, r: r > 0,
    ),
    Decision(
        "0020",
        "outer-block prepend",
        "codegen.cpp_fusion.scheduling.block_prepend",
        "prepend_fusion_score",
        lambda a, r: r > 0,
    ),
    Decision(
        "0021",
        "softmax reciprocal",
        "codegen.cpp_fusion.lowering.softmax_reciprocal",
        "multiplies_by_reciprocal",
        lambda a, r: bool(r),
    ),
    Decision(
        "0022",
        "group norm channel sums",
        "codegen.cpp_fusion.lowering.group_norm_channel_sums",
        "sums_per_channel",
        lambda a, r: bool(r),
    ),
    Decision(
        "0023",
        "outer reduction blocks",
        "codegen.cpp_fusion.lowering.outer_reduction_blocks",
        "split_for_outer_reduction",
        lambda a, r: r > 1,
    ),
)



def series_patches() -> list[str]:
    """The patch numbers of the running torch's series."""
    from fusion_overlay.patchset import load_series

    return load_series().numbers()


# The decisions of the running torch's series: a patch stock has caught up
# with (0006 from 2.14.1 on) is not in it, and has nothing to reach.
_SERIES = set(series_patches())
REACH = tuple(d for d in ALL_REACH if d.feature in _SERIES)
FEATURES = tuple(dict.fromkeys(d.feature for d in REACH))
TITLES = {d.feature: d.title.split(" (")[0] for d in REACH}

_counts: collections.Counter[str] = collections.Counter()
_installed: list[str] = []  # features whose decision function was found


def install() -> list[str]:
    """Wrap every decision function once; return the features not found."""
    if _installed:
        return [f for f in FEATURES if f not in _installed]
    by_target: dict[tuple[str, str], list[Decision]] = {}
    for decision in REACH:
        by_target.setdefault((decision.module, decision.function), []).append(decision)
    for (module_name, function), decisions in by_target.items():
        try:
            module = importlib.import_module(f"torch._inductor.{module_name}")
        except ImportError:
            continue
        owner: Any = module
        *path, name = function.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        original = getattr(owner, name, None) if owner is not None else None
        if original is None:
            continue
        setattr(owner, name, _counting(original, decisions))
        _installed.extend(d.feature for d in decisions)
    return [f for f in FEATURES if f not in _installed]


def _counting(original, decisions: list[Decision]):
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        for decision in decisions:
            try:
                if decision.changed(args, result):
                    _counts[decision.feature] += 1
            except Exception:  # noqa: BLE001 - counting must never break codegen
                pass
        return result

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def reset() -> None:
    _counts.clear()


def counts() -> dict[str, int]:
    """Per feature, the decisions that changed a kernel since ``reset()``."""
    from torch._inductor import metrics

    result = {f: _counts.get(f, 0) for f in FEATURES}
    result["0005"] += metrics.num_loop_reordering  # stock's counter, CPU reorders
    return result

"""Questions about scheduler nodes that the overlay's C++ fusion features share.

Each is asked by several features (the loop splits, loop ordering after
fusion, the block fusions and their tiles, the reduction accumulators) and is
answered here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


def static_sizes(sizes: Sequence[sympy.Expr]) -> list[int] | None:
    """The sizes as ints; None if one of them is symbolic."""
    if all(isinstance(s, (int, sympy.Integer)) for s in sizes):
        return [int(s) for s in sizes]
    return None


def under_rollback_scope(leaves: Iterable) -> bool:
    """True inside ``Scheduler.can_fuse``, whose loop mutation tracker listens
    on every leaf (``SchedulerNode``) and undoes the loop changes of a
    rejected fusion: a feature may change loops there and only there."""
    return all(sn._loop_mutation_listener is not None for sn in leaves)


def is_outer_loop_fused(node) -> bool:
    """Whether ``node`` is the C++ backend's ``OuterLoopFusedSchedulerNode``."""
    # codegen/cpp.py imports the scheduler, which imports this module's users
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    return isinstance(node, OuterLoopFusedSchedulerNode)

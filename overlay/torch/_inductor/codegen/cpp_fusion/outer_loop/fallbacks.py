"""What the C++ backend tries when the kernels of an outer-loop fusion fail to merge.

Stock's ``CppScheduling.codegen_outer_loop_node`` generates every member of an
``OuterLoopFusedSchedulerNode`` as a kernel, checks that the kernels agree on
the fused outer levels (``check_outer_fusion_loop_level_attr``) and, when they
do not, emits every member as a loop nest of its own.  Before that last step
the overlay tries the fallbacks ``CppScheduling.outer_loop_fallbacks()``
lists, in that order; the first one that generates the node ends the search:

=========  =====================================  ============================
fallback   what it generates                      its decisions
=========  =====================================  ============================
Retile     the node, with vector tiling kept      outer_loop/retile.py
           below the fusion depth
Shallower  the node fused over fewer outer loops  shallower.py
Prepend    a producer that joined in front        block_prepend.py
           alone, then the rest fused
Regroup    all members but the last fused, then   regroup.py
           the last alone
=========  =====================================  ============================

``FailedMerge`` owns the failed-merge path: ``codegen_outer_loop_node``
hands it the node, the kernels of the failed first attempt (stock's, or
first_attempt.py's), its merge, the kernel
counters from before the node and the list of fallbacks, and calls ``run``
once.  ``run`` is the one loop that runs them.  Before each attempt it
restores the kernel counters to their values before the node (the failed
attempt's kernels are not emitted) and turns in-place buffers off: the
failed attempt already made its in-place decisions in the kernel group's
shared args, as before stock's own fallback.  When none generates the node,
it restores the counters once more, so that stock's separate nests count
only the kernels they emit.  An attempt that does not merge rolls back its
own local buffers (``try_outer_loop_fusion_with_local_buf``) and emits
nothing.  The fallbacks call their features' functions through the feature
module, where a test or the fuzzer's reach probe may replace them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, ClassVar

import torch
from torch._inductor import metrics
from torch._inductor.codegen.common import REMOVED, RemovedArg
from torch._inductor.virtualized import V

from .. import flag_requirements
from ..scheduling import block_prepend
from . import regroup, shallower
from .retile import OuterLoopRetile, is_vectorized

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .first_attempt import FirstAttempt

    from torch._inductor.codegen.cpp import (
        CppKernelProxy,
        CppScheduling,
        OuterLoopFusedSchedulerNode,
    )

    # One try at generating the node; True when it generated it.
    Attempt = Callable[[], bool]


@dataclasses.dataclass
class FailedMerge:
    """An outer-loop fused node whose kernels failed stock's merge, and what
    to try before stock's separate nests."""

    scheduling: CppScheduling
    node: OuterLoopFusedSchedulerNode
    # the kernels of the failed first attempt: stock's, or first_attempt.py's
    # (their loop ranges are stock's; stock's vectorization: stock_vectorized)
    stock_proxies: list[CppKernelProxy]
    # codegen_outer_loop_node's merge attempt: (node, retile or None) -> merged
    merge: Callable[[OuterLoopFusedSchedulerNode, OuterLoopRetile | None], bool]
    # metrics.generated_cpp_vec_kernel_count and generated_kernel_count
    # before the node
    counters: tuple[int, int]
    fallbacks: tuple[OuterLoopFallback, ...]  # CppScheduling.outer_loop_fallbacks()
    # CppScheduling.outer_loop_first_attempt(): what made the first attempt,
    # None for stock's (first_attempt.py)
    first: FirstAttempt | None = None

    def run(self) -> bool:
        """Run the enabled fallbacks in order until one generates the node;
        False (nothing generated) when none does."""
        enabled = [fallback for fallback in self.fallbacks if fallback.enabled()]
        for fallback in enabled:
            for attempt in fallback.attempts(self):
                self.restore_counters()
                with torch._inductor.config.patch(inplace_buffers=False):
                    if attempt():
                        drop_args_of_removed_buffers(self.scheduling.kernel_group.args)
                        return True
        if enabled:
            self.restore_counters()  # before stock's separate nests
        return False

    @property
    def stock_vectorized(self) -> list[bool]:
        """Whether stock's attempt vectorized each member's kernel."""
        if self.first is not None:
            return self.first.stock_vectorized()
        return [is_vectorized(proxy) for proxy in self.stock_proxies]

    def restore_counters(self) -> None:
        vec_kernels, kernels = self.counters
        metrics.generated_cpp_vec_kernel_count = vec_kernels
        metrics.generated_kernel_count = kernels


class OuterLoopFallback:
    """One way to keep (part of) a fusion that failed to merge: its name, the
    ``config.cpp`` flag that switches it, and its attempts in order."""

    name: ClassVar[str]
    flag: ClassVar[str]

    def enabled(self) -> bool:
        return flag_requirements.enabled(self.flag)

    def attempts(self, failed: FailedMerge) -> Iterator[Attempt]:
        raise NotImplementedError


class Retile(OuterLoopFallback):
    name = "retile"
    flag = "outer_loop_fusion_retile"

    def attempts(self, failed: FailedMerge) -> Iterator[Attempt]:
        if failed.first is not None and failed.first.retile_decided:
            return  # the first attempt's kernels were the re-tile's, refused
        retile = OuterLoopRetile.for_failed_attempt(
            failed.node, failed.stock_proxies, failed.stock_vectorized
        )
        if retile is not None:
            yield functools.partial(failed.merge, failed.node, retile)


class OneAttemptFallback(OuterLoopFallback):
    """A fallback whose one attempt generates the node another way."""

    def codegen(
        self, scheduling: CppScheduling, node: OuterLoopFusedSchedulerNode
    ) -> bool:
        raise NotImplementedError

    def attempts(self, failed: FailedMerge) -> Iterator[Attempt]:
        yield functools.partial(self.codegen, failed.scheduling, failed.node)


class Regroup(OneAttemptFallback):
    name = "regroup"
    flag = "outer_loop_regroup"

    def codegen(self, scheduling, node) -> bool:
        return regroup.codegen_without_last_member(scheduling, node)


class Shallower(OuterLoopFallback):
    name = "shallower"
    flag = "outer_loop_shallower_fusion"

    def attempts(self, failed: FailedMerge) -> Iterator[Attempt]:
        attempts = shallower.shallower_attempts(
            failed.node, failed.stock_proxies, failed.stock_vectorized
        )
        for shallow, retile in attempts:
            yield functools.partial(failed.merge, shallow, retile)


class Prepend(OneAttemptFallback):
    name = "prepend"
    flag = "outer_block_prepend"

    def codegen(self, scheduling, node) -> bool:
        return block_prepend.codegen_without_prepended_member(
            scheduling, node
        )


def drop_args_of_removed_buffers(args) -> None:
    """The failed attempt's kernels registered the buffers they stored as
    arguments of the kernel group; a fallback that keeps one of them in a
    local buffer (a regrouped head whose members now hold all its users)
    removes it from the graph, and the wrapper allocates nothing for it.
    Stock never gets here: its fallback stores every buffer again."""
    for name, inner in list(args.output_buffers.items()):
        if name in V.graph.removed_buffers and not isinstance(inner, RemovedArg):
            args.output_buffers[name] = REMOVED

"""Regroup an outer-loop fusion that failed to merge, instead of unfusing it.

When the kernels of an OuterLoopFusedSchedulerNode cannot share their outer
loops (stock's loop-level check and the re-tiling of
outer_loop/retile.py both refuse), stock emits every member as a loop
nest of its own, even when all members but the last would merge.  A node
grows by appending members, so its members without the last one form an
outer-loop fusion the scheduler accepted too: we generate that node (which
may in turn drop its own last member) and then the last member alone.  Nodes
of two members keep stock's fallback.  Example: with loop ordering after
fusion, log_softmax over a reduced dimension joined its log step to the max
and sum kernels; the three failed to merge and became 5 loop nests where
the max and sum kernels merge on their own (4 nests, as with the flag off).

Flag: ``config.cpp.outer_loop_regroup`` (TORCHINDUCTOR_CPP_OUTER_LOOP_REGROUP).
"""

from __future__ import annotations

from torch._inductor.scheduler import fusion_log


def codegen_without_last_member(scheduling, node) -> bool:
    """Generate ``node`` as its members but the last, fused, then the last.

    Returns False (nothing generated) for a node of two members.
    """
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    members = list(node.get_outer_nodes())
    if len(members) <= 2:
        return False
    head = OuterLoopFusedSchedulerNode(
        node.scheduler, members[:-1], node.outer_loop_fusion_depth
    )
    fusion_log.debug(
        "outer-loop fusion %s failed to merge: retrying without %s",
        node.get_name(),
        members[-1].get_name(),
    )
    scheduling.codegen_outer_loop_node(head)
    codegen_alone(scheduling, members[-1])
    return True


def codegen_alone(scheduling, member) -> None:
    """Generate one member of an outer-loop fused node as a kernel of its own."""
    nodes = member.get_nodes()
    proxy = scheduling.kernel_proxy_cls(scheduling.kernel_group)
    proxy.codegen_nodes(nodes)
    scheduling.kernel_group.finalize_kernel(proxy, nodes)

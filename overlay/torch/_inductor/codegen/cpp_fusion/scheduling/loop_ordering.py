"""Loop ordering after fusion for the C++ (CPU) backend.

Stock Inductor decides CPU loop orders before fusion: ``ir.py`` merges CPU
loops while lowering, scheduler nodes normalize their CPU dependencies, and
``Scheduler.merge_loops``, loop reordering, pointwise reindexing and index
inversion all skip CPU nodes.  Behind ``config.cpp.loop_ordering_after_fusion``
these hooks keep CPU loop orders open until fusion, as on GPU.

Flag: ``config.cpp.loop_ordering_after_fusion``
(TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION), effective only together with
the global ``config.loop_ordering_after_fusion``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch._inductor import config
from torch.utils._ordered_set import OrderedSet

from .. import speculation
from ..costs import strided_inner_bytes, strided_inner_deps
from ..nodes import under_rollback_scope
from . import reindexed_affine

loop_ordering_log = torch._logging.getArtifactLogger(__name__, "loop_ordering")


def enabled_for_device(device) -> bool:
    """Whether loop orders of nodes on ``device`` are decided after fusion."""
    device_type = getattr(device, "type", device)
    return (
        device_type == "cpu"
        and speculation.worth_speculating()
        and config.loop_ordering_after_fusion
        and config.cpp.loop_ordering_after_fusion
        and config.cpu_backend == "cpp"
    )


def enabled_for_nodes(*nodes) -> bool:
    return all(node.is_cpu() for node in nodes) and enabled_for_device("cpu")


def reindexing_enabled_for_nodes(*nodes) -> bool:
    """Whether CPU pointwise nodes may be reindexed onto a reduction's loops.

    Upstream reindexes (``config.loop_reindexing_after_fusion``) with or
    without loop ordering after fusion; on CPU both hang on our flag.
    """
    return (
        all(node.is_cpu() for node in nodes)
        and speculation.worth_speculating()
        and config.loop_reindexing_after_fusion
        and config.cpp.loop_ordering_after_fusion
        and config.cpu_backend == "cpp"
    )


def _recompute_group(snode) -> None:
    device = snode.node.get_device_or_error()
    group_fn = snode.scheduler.get_backend(device).group_fn
    snode.group = (device, group_fn(snode.get_ranges()))


def fused_node_group(node):
    """A fused node's group: its reduction member's, as the C++ kernel loops."""
    return max(node.snodes, key=lambda n: int(n.is_reduction())).group


def _groups_agree(fused) -> bool:
    """Whether every member fits the fused node's group, as C++ codegen needs.

    ``CppKernelProxy.codegen_functions`` accepts a member whose sizes are the
    group, the group flattened, or the group's iteration part (a suffix).
    """
    _, (group, reduction_group) = fused_node_group(fused)
    accepted = [
        (group, reduction_group),
        (tuple(group) + tuple(reduction_group), ()),
        (group, ()),
    ]
    return all(tuple(map(tuple, sn.group[1])) in accepted for sn in fused.snodes)


def merge_loops_consistently(node) -> None:
    """Merge the loops of a CPU node after fusion, keeping its members aligned.

    Upstream skips CPU here because merging the members of a fused node one by
    one can give them different loop groups, which the C++ kernel cannot
    generate (the ``ranges_from_index_vars`` assertion).  We merge every
    member, recompute the groups, and keep the result only when the members
    still agree; otherwise all members return to their fused loop order.
    """
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode
    from torch._inductor.scheduler import SchedulerNode, _LoopStateSnapshot

    snodes = node.get_nodes()
    if not all(isinstance(sn, SchedulerNode) for sn in snodes) or any(
        sn.is_template() for sn in snodes
    ):
        return
    snapshot = _LoopStateSnapshot.create(tuple(_members(node)))
    if isinstance(node, OuterLoopFusedSchedulerNode):
        merged = _merge_outer_loop_fused(node)
        if not merged:
            snapshot.restore()
            merged = _merge_fully_fused_outer_members(node)
        if not merged:
            snapshot.restore()
            merged = _merge_below_outer_levels(node)
    else:
        merged = _merge_member(node)
        if not merged and isinstance(node, _fused_node_cls()):
            snapshot.restore()
            merged = _merge_members_together(node.get_nodes())
            if merged:
                node.group = fused_node_group(node)
                merged = _groups_agree(node)
    if not merged:
        loop_ordering_log.debug(
            "keep fused loop order of %s: merged members disagree", node.get_name()
        )
        snapshot.restore()
        _normalize_deps(node)


def _members(node):
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    if isinstance(node, OuterLoopFusedSchedulerNode):
        return list(node.get_outer_nodes())
    return [node]


def _merge_member(node) -> bool:
    """Merge a SchedulerNode or FusedSchedulerNode; False if members disagree."""
    from torch._inductor.scheduler import FusedSchedulerNode

    for sn in node.get_nodes():
        sn.merge_loops()
        _recompute_group(sn)
    if isinstance(node, FusedSchedulerNode):
        node.group = fused_node_group(node)
        return _groups_agree(node)
    return True


def _merge_outer_loop_fused(node) -> bool:
    """Merge every outer member; the fused outer loops must stay shared.

    The fused levels are the leading loops whose sizes multiply to the old
    outer extent.  After merging, every member must again start with the same
    such levels; the fusion depth becomes their number.
    """
    import math

    members = list(node.get_outer_nodes())
    outer_extent = math.prod(members[0].group[1][0][: node.outer_loop_fusion_depth])
    new_prefixes = set()
    for member in members:
        if not _merge_member(member):
            return False
        prefix = _prefix_with_product(member.group[1][0], outer_extent)
        if prefix is None:
            return False
        new_prefixes.add(tuple(prefix))
    if len(new_prefixes) != 1:
        return False
    node.outer_loop_fusion_depth = len(new_prefixes.pop())
    node.group = fused_node_group(node)
    return True


def _merge_below_outer_levels(node) -> bool:
    """Merge every outer member's loops below the fused levels, keep those.

    When merging whole members breaks the shared outer loops (e.g. GroupNorm's
    statistics merge batch and group into one loop, while the affine step
    cannot), the members must still not keep every loop unmerged: the C++
    backend vectorizes and parallelizes the loop after the fused levels, and
    stock's heuristics (the 300x inner-to-outer rule for outer-loop fusion and
    for parallel reductions) read that loop's range as the whole inner extent.
    """
    depth = node.outer_loop_fusion_depth
    for member in node.get_outer_nodes():
        for sn in member.get_nodes():
            merge_loops_below(sn, depth)
            _recompute_group(sn)
    return _refresh_outer_groups(node)


def _merge_members_together(snodes) -> bool:
    """Merge the loops that all of ``snodes`` can merge, the same for each.

    Merged one by one, fused members can disagree: a pointwise member
    flattens its whole iteration space while a reduction member's index
    keeps the batch loop apart from the pixels (a softmax over channels).
    The fused node would then keep every loop unmerged, an image's pixels
    split into rows with a masked vector tail on each.  Merging each member
    over the indices of all members gives them the same iteration loops.
    """
    from torch._inductor.scheduler import SchedulerNode

    if not all(isinstance(sn, SchedulerNode) for sn in snodes):
        return False
    if len({tuple(sn.loop_body.sizes[0]) for sn in snodes}) != 1:
        return False
    shared = {sn: _index_exprs_over(sn, snodes) for sn in snodes}
    for sn in snodes:
        merge_loops_below(sn, 0, shared[sn])
        _recompute_group(sn)
    # the same indices give every member the same loops; the caller restores
    # the members if not
    return len({tuple(sn.loop_body.sizes[0]) for sn in snodes}) == 1


def _merge_fully_fused_outer_members(node) -> bool:
    """Merge an outer-loop fusion whose fused levels are all of its loops.

    Its members share every iteration loop, so merging them together keeps
    the fusion; the fused depth becomes the merged loop count.
    """
    snodes = node.get_nodes()
    depth = node.outer_loop_fusion_depth
    if any(len(sn.loop_body.sizes[0]) != depth for sn in snodes):
        return False
    if not _merge_members_together(snodes):
        return False
    node.outer_loop_fusion_depth = len(snodes[0].loop_body.sizes[0])
    return _refresh_outer_groups(node)


def _refresh_outer_groups(node) -> bool:
    """Recompute the groups of an outer-loop fusion's fused members and its
    own after their loops were merged; False (the caller restores the
    members) if a fused member's nodes no longer agree."""
    for member in node.get_outer_nodes():
        if isinstance(member, _fused_node_cls()):
            member.group = fused_node_group(member)
            if not _groups_agree(member):
                return False
    node.group = fused_node_group(node)
    return True


def _index_exprs_over(target, snodes) -> list:
    """Every member's indices over ``target``'s iteration variables.

    Members share their iteration sizes; another member's reduction
    variables become fresh symbols, which no merge of ``target``'s loops
    depends on.
    """
    import sympy

    target_iter_vars = target.loop_body.vars[0]
    exprs = []
    for sn in snodes:
        iter_vars, reduce_vars = sn.loop_body.vars
        mapping = dict(zip(iter_vars, target_iter_vars))
        if sn is not target:
            mapping.update({v: sympy.Dummy(str(v)) for v in reduce_vars})
        exprs += [e.xreplace(mapping) for e in sn.loop_body.indexing_exprs.values()]
    return exprs


def _fused_node_cls():
    from torch._inductor.scheduler import FusedSchedulerNode

    return FusedSchedulerNode


def merge_loops_below(snode, depth: int, exprs=None) -> None:
    """``SchedulerNode.merge_loops`` for the iteration loops from ``depth`` on
    and all reduction loops; the first ``depth`` iteration loops stay as they are.
    ``exprs``: the indices that must stay expressible (default: the node's own).
    """
    from torch._inductor import dependencies
    from torch._inductor.codegen.common import index_prevent_reordering
    from torch._inductor.loop_body import LoopBody
    from torch._inductor.virtualized import V

    body = snode.loop_body
    iter_vars, reduce_vars = body.vars
    iter_sizes, reduce_sizes = body.sizes
    if len(iter_vars) < depth:
        return
    if exprs is None:
        exprs = [*body.indexing_exprs.values()]

    def simplify(variables, sizes):
        return V.graph.sizevars._simplify_loops(
            variables, sizes, index_prevent_reordering(exprs, variables, sizes)
        )[:2]

    inner_sizes, inner_reindex = simplify(iter_vars[depth:], iter_sizes[depth:])
    new_reduce_sizes, reduce_reindex = simplify(reduce_vars, reduce_sizes)
    if (
        list(inner_sizes) == list(iter_sizes[depth:])
        and list(new_reduce_sizes) == list(reduce_sizes)
    ):
        return
    (new_iter_vars, new_reduce_vars), var_ranges = (
        dependencies.index_vars_no_squeeze(
            [*iter_sizes[:depth], *inner_sizes], new_reduce_sizes, prefix="p"
        )
    )
    snode.apply_loop_body(
        LoopBody(
            body,
            [
                [*new_iter_vars[:depth], *inner_reindex(new_iter_vars[depth:])],
                reduce_reindex(new_reduce_vars),
            ],
            var_ranges,
            new_iter_vars,
            new_reduce_vars,
            allow_same_symbol_in_index=True,
        )
    )


def _prefix_with_product(sizes, product):
    running = 1
    for i, size in enumerate(sizes):
        running *= size
        if running == product:
            return sizes[: i + 1]
    return None


def _normalize_deps(node) -> None:
    """Canonical dependency names for nodes whose loops stay unmerged."""
    from torch._inductor.scheduler import SchedulerNode

    for sn in node.get_nodes():
        if isinstance(sn, SchedulerNode):
            sn.refresh_dependencies(normalize=True, need_clear_tiling_cache=False)


def try_reindex_pointwise_for_reduction(scheduler, node1, node2) -> bool:
    """CPU counterpart of ``Scheduler._try_reindex_pointwise_for_reduction``.

    The C++ backend groups loops as ``(iteration sizes, reduction sizes)``
    tuples rather than Triton's ``(numel, rnumel)``, so the pointwise side is
    reindexed onto the reduction's full loop sizes, a form the C++ kernel
    accepts for fused members.  It is applied only if the two nodes then
    share a dependency exactly (checked on the deps the reindexed loops
    would have, computed once per loop bodies and target).
    """
    import math

    from torch._inductor.scheduler import (
        FusedSchedulerNode,
        SchedulerNode,
        refresh_group_node_dependencies,
    )
    from torch._inductor.virtualized import V

    if node1.is_reduction() == node2.is_reduction():
        return False
    reduction, pointwise = (node1, node2) if node1.is_reduction() else (node2, node1)
    _, (group, reduction_group) = reduction.group
    target = [*group, *reduction_group]
    snodes = pointwise.get_nodes()
    if not all(
        isinstance(sn, SchedulerNode) and not sn.get_ranges()[1] for sn in snodes
    ):
        return False
    sizevars = V.graph.sizevars
    if not all(
        sizevars.statically_known_equals(
            math.prod(sn.get_ranges()[0]), math.prod(target)
        )
        for sn in snodes
    ):
        return False
    if all(tuple(sn.get_ranges()[0]) == tuple(target) for sn in snodes):
        return False
    deps = (pointwise.read_writes, reduction.read_writes)
    if reindexed_affine.cannot_share(*deps, target):
        return False  # known from the deps, before any loop body is rebuilt
    reindexed = _reindexed_deps(scheduler, pointwise, target)
    if not _share_a_dependency(scheduler, reindexed, reduction.read_writes):
        return False
    for sn in snodes:
        sn.apply_loop_reindexing(target)
    if isinstance(pointwise, FusedSchedulerNode):
        pointwise.group = snodes[0].group
        refresh_group_node_dependencies(pointwise)
    if not enabled_for_device("cpu"):
        # Loops stay as they are from here on: canonical dependency names,
        # as stock's merged nodes have them.
        _normalize_deps(pointwise)
        if isinstance(pointwise, FusedSchedulerNode):
            refresh_group_node_dependencies(pointwise)
    loop_ordering_log.debug(
        "reindexed %s onto the loops %s of %s",
        pointwise.get_name(),
        target,
        reduction.get_name(),
    )
    return True


def _reindexed_deps(scheduler, pointwise, target):
    """``pointwise.read_writes`` after reindexing its loops to ``target``;
    the node is left as it was.  The scheduler asks again for the same node
    in every fusion round and reorder check, against other partners, and
    each answer rebuilds the node's loop bodies: the answers are kept in
    the backend (``CppScheduling.loop_body_answers``)."""
    from torch._inductor.scheduler import (
        FusedSchedulerNode,
        _LoopStateSnapshot,
        refresh_group_node_dependencies,
    )

    snodes = pointwise.get_nodes()
    # The loop bodies are held, so the key compares them by identity.
    key = ("reindexed", tuple(sn.loop_body for sn in snodes), tuple(target))
    cache = scheduler.get_backend(pointwise.get_device()).loop_body_answers
    if key not in cache:
        snapshot = _LoopStateSnapshot.create((pointwise,))
        for sn in snodes:
            sn.apply_loop_reindexing(target)
        if isinstance(pointwise, FusedSchedulerNode):
            pointwise.group = snodes[0].group
            refresh_group_node_dependencies(pointwise)
        cache[key] = pointwise.read_writes
        snapshot.restore()
    return cache[key]


def _share_a_dependency(scheduler, read_writes1, read_writes2) -> bool:
    common = read_writes1.buffer_names() & read_writes2.buffer_names()
    deps1 = {dep.name: dep for dep in read_writes1.reads_and_writes()}
    deps2 = {dep.name: dep for dep in read_writes2.reads_and_writes()}
    return any(scheduler.deps_match_normalized(deps1[n], deps2[n]) for n in common)


def refresh_group_after_reorder(node) -> None:
    """Recompute a CPU node's loop group after its loops were reordered.

    Triton groups are ``(numel, rnumel)`` and do not depend on loop order; the
    C++ backend's group is the ordered loop sizes, which fusion decisions
    (outer-loop fusion depth, compatible ranges) and codegen read.  A group
    left stale by a reorder is what made C++ codegen fail upstream.
    """
    from torch._inductor.scheduler import FusedSchedulerNode

    if not node.is_cpu():
        return
    if isinstance(node, FusedSchedulerNode):
        node.group = fused_node_group(node)
    else:
        _recompute_group(node)


def reorder_is_worthwhile(node, new_order) -> bool:
    """Cost guard for a CPU loop reorder: no more strided inner-loop traffic.

    Upstream's GPU reordering needed a rollback after a 6x slowdown; on CPU a
    reorder that makes the innermost loop walk a large output with a stride
    costs more than the fusion it enables (softmax over dim 0).  A strided
    walk that stock's nests already make is not added by the reorder, though:
    where the new order walks a buffer as its one other user does, their
    fusion removes that buffer, and both walks over it with it
    (``_strided_walks_fusion_removes``).  The deps of the new order are
    computed on reordered copies of the loop bodies: the nodes are not
    touched.
    """
    from torch._inductor.scheduler import SchedulerNode

    snodes = [sn for sn in node.get_nodes() if isinstance(sn, SchedulerNode)]
    reordered = [_reordered(sn, new_order) for sn in snodes]
    before = sum(strided_inner_bytes(sn, count_cached=False) for sn in snodes)
    after = sum(strided_inner_bytes(sn, count_cached=False) for sn in reordered)
    if after > before:
        stock_walks, removed_walks = _strided_walks_fusion_removes(node, reordered)
        before += stock_walks
        after -= removed_walks
    if after > before:
        loop_ordering_log.debug(
            "reorder %s of %s rejected: strided inner-loop bytes %d -> %d",
            new_order,
            node.get_name(),
            before,
            after,
        )
        return False
    return True


def _strided_walks_fusion_removes(node, reordered) -> tuple[int, int]:
    """Strided bytes over the buffers that fusing ``node`` in its new order
    with a partner would remove: ``(partner's, node's)``.

    Such a buffer is accessed by ``node`` and one other (fused) node only, is
    no graph output, and both visit its elements in the same order, so one
    pass of the fused nest produces and consumes each element and the C++
    kernel drops the buffer (``remove_kernel_local_buffers``).  The
    partner's strided walk over it is one stock's nests make; the node's,
    which the reorder makes strided, goes away with the buffer.  E.g.
    ``realize(x * 2) + realize(y * 3)`` for a transposed ``y``: stock's
    second nest reads ``y * 3`` through transposed tiles; fused, the nest
    reads ``y`` through them instead and never writes ``y * 3``.  Softmax
    over dim 0 gets nothing: its exp buffer is read by two nodes, one of
    them row by row.
    """
    from torch._inductor.scheduler import SchedulerNode

    scheduler = node.scheduler
    own = OrderedSet(sn.get_name() for sn in node.get_nodes())
    new_walks: dict[str, list] = {}
    for snode in reordered:
        for dep, size in strided_inner_deps(snode, count_cached=False):
            new_walks.setdefault(dep.name, []).append((dep, size))
    stock_bytes = removed_bytes = 0
    for name, walks in new_walks.items():
        partner = _sole_partner(scheduler, name, own)
        if partner is None:
            continue
        partner_snodes = [
            sn for sn in partner.get_nodes() if isinstance(sn, SchedulerNode)
        ]
        partner_deps = _deps_on(partner_snodes, name)
        if not partner_deps or not all(
            _same_walk(dep, other)
            for dep in _deps_on(reordered, name)
            for other in partner_deps
        ):
            continue
        stock_bytes += sum(
            size
            for sn in partner_snodes
            for dep, size in strided_inner_deps(sn, count_cached=False)
            if dep.name == name
        )
        removed_bytes += sum(size for _, size in walks)
    return stock_bytes, removed_bytes


def _deps_on(snodes, name: str) -> list:
    return [
        dep
        for sn in snodes
        for dep in sn.read_writes.reads_and_writes()
        if dep.name == name
    ]


def _sole_partner(scheduler, name: str, own):
    """The one node besides ``own``'s members that accesses buffer ``name``,
    if fusing the two would remove the buffer; else None."""
    buf = scheduler.name_to_buf.get(name)
    if buf is None:
        return None
    accessors = [buf.defining_op_name()] + [
        user.get_name() for user in buf.users if not user.is_weak
    ]
    if not all(a in scheduler.name_to_fused_node for a in accessors):
        return None  # a graph output
    partners = {
        scheduler.name_to_fused_node[a].get_name(): scheduler.name_to_fused_node[a]
        for a in accessors
        if a not in own
    }
    if len(partners) != 1:
        return None
    (partner,) = partners.values()
    fused = own | OrderedSet(sn.get_name() for sn in partner.get_nodes())
    if not scheduler.can_buffer_be_removed_through_fusion(name, fused):
        return None
    return partner


def _same_walk(dep, other) -> bool:
    """Whether two accesses visit the same elements at the same iterations
    of loops of the same sizes (their variables renamed in loop order)."""
    from torch._inductor.dependencies import MemoryDep
    from torch._inductor.utils import sympy_subs
    from torch._inductor.virtualized import V

    if not isinstance(other, MemoryDep) or len(dep.var_names) != len(
        other.var_names
    ):
        return False
    sizevars = V.graph.sizevars
    if not sizevars.statically_known_list_equals(dep.size, other.size):
        return False
    renamed = sympy_subs(dep.index, dict(zip(dep.var_names, other.var_names)))
    return sizevars.statically_known_equals(renamed, other.index)


def _reordered(snode, new_order) -> SimpleNamespace:
    """What ``strided_inner_bytes`` reads of ``snode`` (its deps and its
    scheduler), for its loops reordered to ``new_order``."""
    from torch._inductor import dependencies

    body = snode.loop_body.reorder_iter_loops(new_order)
    read_writes = dependencies.extract_read_writes(
        body, *body.sizes, normalize=False
    ).rename(snode.mutation_renames)
    return SimpleNamespace(read_writes=read_writes, scheduler=snode.scheduler)


# --------------------------------------------------------------------------
# C++ fusion rules for loops left open until fusion


# Reorder rounds after the first, as Scheduler.fuse_nodes allows plain rounds.
MAX_REORDER_ROUNDS = 10


def more_reorder_rounds(scheduler, nodes):
    """Repeat the reorder round while it still fuses nodes.

    Upstream runs one: a chain that needs two reorders (a pointwise node
    reindexed onto a reduction, then the reduction's consumer) stopped after
    its first fusion.  On GPU one round is kept; on CPU the rounds go on like
    the plain fusion rounds before them.
    """
    for _ in range(MAX_REORDER_ROUNDS - 1):
        count = len(nodes)
        nodes = scheduler.fuse_nodes_once(nodes, is_reorder_round=True)
        if len(nodes) in (count, 1):
            break
    return nodes


def reduction_first_compatible(node1, node2) -> bool:
    """Whether a reduction and a later pointwise node share their loops.

    The C++ backend fuses a pointwise node over ``(iteration + reduction)``
    sizes with a reduction over ``(iteration | reduction)`` sizes when the
    pointwise node comes first; its kernel generates either order.  With loop
    orders decided after fusion, a reorder often makes the pointwise side match
    only after the reduction was scheduled (``x.sum(-1), x.t().contiguous()``).
    """
    if not enabled_for_nodes(node1, node2):
        return False
    _, (vars1, reduce1) = node1.group
    _, (vars2, reduce2) = node2.group
    return bool(reduce1) and reduce2 == () and tuple(vars2) == tuple(vars1) + tuple(
        reduce1
    )


def merge_loops_to_fuse(node1, node2) -> bool:
    """Merge the loops of two CPU nodes when that lets the C++ backend fuse them.

    Stock merges CPU loops while lowering, so two nodes over the same memory
    with different views, ``(10, 10)`` and ``(100,)``, both arrive as
    ``(100,)`` and fuse.  With loop orders decided after fusion the loops stay
    unmerged, and the C++ backend, which compares ordered loop sizes, refused
    pairs that stock fuses.  Here both nodes are merged as stock would have,
    if the merged groups fuse by the C++ backend's group rules; the caller,
    ``Scheduler.can_fuse``, rolls the merge back when the fusion is rejected.
    Asked outside ``can_fuse`` (fusion pairs ranked by
    ``get_fusion_pair_priority``), where nothing would roll a merge back, the
    nodes are left as they are and the answer is False.
    """
    if not enabled_for_nodes(node1, node2):
        return False
    if not _nodes_under_rollback_scope(node1, node2):
        return False
    merged = [_merged_group(node) for node in (node1, node2)]
    if None in merged or merged == [node1.group[1], node2.group[1]]:
        return False
    if not _groups_fuse(*merged):
        return False
    for node in (node1, node2):
        _merge_for_fusion(node)
    loop_ordering_log.debug(
        "merged the loops of %s and %s to fuse them: %s",
        node1.get_name(),
        node2.get_name(),
        merged,
    )
    return True


def _nodes_under_rollback_scope(*nodes) -> bool:
    """True inside Scheduler.can_fuse, whose loop mutation tracker listens on
    every leaf node and undoes the loop changes of a rejected fusion."""
    from torch._inductor.scheduler import SchedulerNode

    return under_rollback_scope(
        sn for node in nodes for sn in node.get_nodes() if isinstance(sn, SchedulerNode)
    )


def _groups_fuse(group1, group2) -> bool:
    """``CppScheduling._why_fuse_nodes``'s group rules, in either order."""
    (vars1, reduce1), (vars2, reduce2) = group1, group2
    return (
        group1 == group2
        or (not reduce1 and vars1 == vars2 + reduce2)
        or (not reduce2 and vars2 == vars1 + reduce1)
    )


def _mergeable_members(node):
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode
    from torch._inductor.scheduler import FusedSchedulerNode, SchedulerNode

    if not isinstance(node, (SchedulerNode, FusedSchedulerNode)):
        return None
    if isinstance(node, OuterLoopFusedSchedulerNode):
        # Merging its members would leave its fusion depth counting loops
        # they no longer have, and the fusion decisions that follow read
        # that depth before merge_loops_consistently sets it again.
        return None
    snodes = [sn for sn in node.get_nodes() if isinstance(sn, SchedulerNode)]
    if len(snodes) != len(node.get_nodes()) or any(
        sn.is_template() or sn.loop_body is None for sn in snodes
    ):
        return None
    return snodes


def _merged_group(node):
    """The group ``node`` would have with merged loops; None if not mergeable."""
    snodes = _mergeable_members(node)
    if snodes is None:
        return None
    device = snodes[0].node.get_device_or_error()
    backend = snodes[0].scheduler.get_backend(device)
    groups = [_merged_loop_group(backend, sn.loop_body) for sn in snodes]
    group = max(groups, key=lambda g: int(bool(g[1])))
    iteration, reduction = group
    accepted = {group, (tuple(iteration) + tuple(reduction), ()), (iteration, ())}
    return group if all(g in accepted for g in groups) else None


def _merged_loop_group(backend, body):
    """``group_fn`` of ``body.merge_loops()``'s sizes.  Every fusion pair a
    node is in asks, and merging rebuilds the body: the answer is kept in
    the backend (``CppScheduling.loop_body_answers``), by the body held."""
    key = ("merged group", body)
    answers = backend.loop_body_answers
    if key not in answers:
        answers[key] = backend.group_fn(body.merge_loops().sizes)
    return answers[key]


def _merge_for_fusion(node) -> None:
    from torch._inductor.scheduler import (
        FusedSchedulerNode,
        refresh_group_node_dependencies,
    )

    for sn in _mergeable_members(node):
        # apply_loop_body tells can_fuse's rollback tracker, merge_loops not.
        sn.apply_loop_body(sn.loop_body.merge_loops())
        _recompute_group(sn)
    if isinstance(node, FusedSchedulerNode):
        node.group = fused_node_group(node)
        refresh_group_node_dependencies(node)

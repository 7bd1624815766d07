"""Mutation testing of the overlay with the fuzzer as the test (``make fuzz-mutants``).

Every mutant is a small hand-written edit of one installed overlay module's
decision code: a bound off by one, a legality check removed, a rollback
skipped.  ``run_mutants`` runs the fuzzer once without a mutant (the
control, which must pass), then once per mutant, each in its own run and
repro directories, with the mutated module imported in place of the
installed one by a ``sitecustomize.py`` on ``PYTHONPATH`` (the venv is never
edited).  A mutant is *killed* when the fuzzer reports a failure (or a
worker dies) within the per-mutant budget; the run stops at the first one.
A mutant whose original text is not found exactly once in the installed
module is *stale*: reported, never run.

Some mutants change only what a heuristic chooses (two-step variance or
Welford, realize or inline): the programs' values cannot tell them apart,
and a fuzzer that compares values cannot kill them.  They are marked
``cost_only`` and counted apart, so that the report shows both the kill
rate of the mutants that can change results and the blind spot.  Mutants
that no program can tell apart from the overlay (argued from the code: a
dead branch, a guard another guard covers) are marked ``equivalent`` with
that argument and counted apart too; the report gives the rate with and
without them.  Where a legality check is two guards that cover each other,
a double fault (``also``: more edits of the same file) removes both.

Report: ``build/fuzz-mutants/report.md`` and ``report.json``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .overlay_coverage import site_root
from .reach import series_patches

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "build" / "fuzz-mutants"


@dataclasses.dataclass(frozen=True)
class Mutant:
    feature: str  # patch number
    name: str
    path: str  # installed file, relative to site-packages
    original: str  # must occur exactly once
    mutated: str
    kind: str  # "bound" | "check" | "rollback" | "other"
    cost_only: str = ""  # why values cannot show it (a heuristic's choice)
    # why no program can show it (argued from the code), counted apart
    equivalent: str = ""
    # further (original, mutated) edits of the same file: a double fault,
    # for a legality check made of two guards that cover each other
    also: tuple[tuple[str, str], ...] = ()

    @property
    def module(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    @property
    def ident(self) -> str:
        return f"{self.feature}-{self.name}"


_I = "torch/_inductor/"
_C = _I + "codegen/"
_F = _C + "cpp_fusion/"
RETILE = _F + "outer_loop/retile.py"
SPLIT = _F + "outer_loop/split.py"
COSTS = _F + "costs.py"
NODES = _F + "nodes.py"
LOAF = _F + "scheduling/loop_ordering.py"
ACC = _F + "emitters/accumulators.py"
BLOCK = _F + "scheduling/block_fusion.py"
LOCAL = _F + "outer_loop/block_local_buffers.py"
INV = _F + "emitters/invariant_loads.py"
REGROUP = _F + "outer_loop/regroup.py"
STREAM = _F + "emitters/streaming_stores.py"
HELPERS = _F + "emitters/kernel_helpers.py"
PREFETCH = _F + "emitters/prefetch.py"
SHALLOW = _F + "outer_loop/shallower.py"
FIRST_ATTEMPT = _F + "outer_loop/first_attempt.py"
TILES = _F + "scheduling/block_tiles.py"
PREPEND = _F + "scheduling/block_prepend.py"
SOFTMAX = _F + "lowering/softmax_reciprocal.py"
GROUP_NORM = _F + "lowering/group_norm_channel_sums.py"
OUTER_BLOCKS = _F + "lowering/outer_reduction_blocks.py"
REQUIREMENTS = _F + "flag_requirements.py"
FALLBACKS = _F + "outer_loop/fallbacks.py"
_SPLITTABLE = 'SPLITTABLE = frozenset({"sum", "prod", "max", "min", "any"})'

# Features whose decisions only choose among equally correct kernels, so no
# semantic mutant of them can change a result (none now: 0023's block count
# is such a choice, but its list of reductions that may split is not).
WITHOUT_MUTANTS: dict[str, str] = {}

ALL_MUTANTS = (
    # 0002 re-tile
    # two outer-loop fusions of row statistics at depth 2 fused together:
    # re-tiled at depth 1, their outer loops (8 and 2) still differ
    Mutant(
        "0002",
        "differing-outer-levels-merged",
        RETILE,
        "        if not _same_outer_loops(\n            proxies, self.depth",
        "        if False and not _same_outer_loops(\n            proxies, self.depth",
        "check",
    ),
    Mutant(
        "0002",
        "steps-not-compared",
        RETILE,
        '("var", "size", "offset", "steps")',
        '("var", "size", "offset")',
        "check",
        equivalent="InnerLevelTilingSelect never tiles a fused level, so every "
        "re-tiled kernel's outer steps are 1",
    ),
    Mutant(
        "0002",
        "one-outer-level-fewer",
        RETILE,
        "return list(loops[:depth]) if",
        "return list(loops[: depth - 1]) if",
        "bound",
    ),
    Mutant(
        "0002",
        "tile-last-fused-level",
        RETILE,
        "inner = [i for i in indices if i >= self.min_level]",
        "inner = [i for i in indices if i >= self.min_level - 1]",
        "bound",
        equivalent="a tiled fused level has steps != 1, which accepts() compares: "
        "the attempt falls back to stock codegen (see tiling-and-steps-unchecked)",
    ),
    Mutant(
        "0002",
        "merge-rejected-anyway",
        RETILE,
        'log_retile(self.node, "rejected: outer levels still differ after re-tiling")\n'
        "            return False",
        'log_retile(self.node, "rejected: outer levels still differ after re-tiling")',
        "rollback",
        equivalent="the branch is dead: var, size and offset were compared before "
        "the attempt (for_failed_attempt) and do not depend on tiling, and "
        "InnerLevelTilingSelect keeps the outer steps 1",
    ),
    Mutant(
        "0002",
        "tiling-and-steps-unchecked",
        RETILE,
        "inner = [i for i in indices if i >= self.min_level]",
        "inner = list(indices)",
        "check",
        also=(('("var", "size", "offset", "steps")', '("var", "size", "offset")'),),
    ),
    Mutant(
        "0002",
        "last-fused-level-tiled-unchecked",
        RETILE,
        "inner = [i for i in indices if i >= self.min_level]",
        "inner = [i for i in indices if i >= self.min_level - 1]",
        "bound",
        also=(('("var", "size", "offset", "steps")', '("var", "size", "offset")'),),
    ),
    # 0002's first attempt: stock's kernels merged without stock's check
    Mutant(
        "0002",
        "first-attempt-stock-check-skipped",
        FIRST_ATTEMPT,
        "            return self.node.check_outer_fusion_loop_level_attr("
        "proxies, self.depth)",
        "            return True",
        "check",
    ),
    # 0003 split
    Mutant(
        "0003",
        "remainder-minus-one",
        SPLIT,
        "remainder = size // (target // before)\n",
        "remainder = size // (target // before) - 1\n",
        "bound",
    ),
    Mutant(
        "0003",
        "inexact-split",
        SPLIT,
        "if target % before == 0 and size % (target // before) == 0:",
        "if target % before == 0:",
        "check",
    ),
    Mutant(
        "0003",
        "members-not-aligned",
        SPLIT,
        "        return None  # members do not share one iteration space",
        "        pass  # members do not share one iteration space",
        "check",
    ),
    Mutant(
        "0003",
        "symbolic-sizes-split",
        NODES,  # split's static sizes (0019's tiles ask the same)
        "    if all(isinstance(s, (int, sympy.Integer)) for s in sizes):\n"
        "        return [int(s) for s in sizes]\n    return None",
        "    return [int(s) for s in sizes]",
        "check",
    ),
    # a fused consumer keeps the group and deps it had before the split
    # (GroupNorm's affine output fused with its SiLU, every op its own node)
    Mutant(
        "0003",
        "fused-consumer-kept",
        SPLIT,
        "        consumer.group = leaves[0].group\n"
        "        refresh_group_node_dependencies(consumer)\n",
        "        pass\n",
        "other",
        cost_only="the seed's kernel loops come from its members' own groups; "
        "the fused node's stale group changes which loops merge after the "
        "fusion (its SiLU over 256 pixels where the split's group gives 16 "
        "rows of 16), not the values",
    ),
    Mutant(
        "0003",
        "split-outside-rollback",
        SPLIT,
        "    if not under_rollback_scope(leaves):\n        return True\n",
        "",
        "rollback",
        equivalent="a split refactors the consumer's loops into another "
        "factorization of the same flat index in the same visiting order: kept "
        "outside can_fuse it changes loop shapes, not values",
    ),
    # 0004 two-step variance
    Mutant(
        "0004",
        "symbolic-rows",
        COSTS,
        "return int(expr) if isinstance(expr, (int, sympy.Integer)) else 0",
        "return int(expr)",
        "check",
    ),
    Mutant(
        "0004",
        "rows-from-1024",
        COSTS,
        "if ROW_WORTH_TWO_STEPS <= numel and row_stays_cached(numel) and fusable:",
        "if ROW_WORTH_TWO_STEPS // 2 < numel and row_stays_cached(numel) and fusable:",
        "bound",
        cost_only="picks Welford or two steps: both compute the variance",
    ),
    Mutant(
        "0004",
        "unfusable-rows-too",
        COSTS,
        "and row_stays_cached(numel) and fusable:",
        "and row_stays_cached(numel):",
        "check",
        cost_only="picks Welford or two steps: both compute the variance",
    ),
    # 0005 loop ordering after fusion
    Mutant(
        "0005",
        "no-restore-when-members-disagree",
        LOAF,
        "        snapshot.restore()\n        _normalize_deps(node)",
        "        _normalize_deps(node)",
        "rollback",
    ),
    Mutant(
        "0005",
        "reindex-kept-without-shared-dep",
        LOAF,
        "        cache[key] = pointwise.read_writes\n        snapshot.restore()\n",
        "        cache[key] = pointwise.read_writes\n",
        "rollback",
        equivalent="apply_loop_reindexing refactors the pointwise node onto sizes "
        "of the same product in the same visiting order: kept, it changes which "
        "fusions score, not values",
    ),
    Mutant(
        "0005",
        "groups-always-agree",
        LOAF,
        "return all(tuple(map(tuple, sn.group[1])) in accepted for sn in fused.snodes)",
        "return True",
        "check",
    ),
    Mutant(
        "0005",
        "stale-group-after-reorder",
        LOAF,
        "    else:\n        _recompute_group(node)\n",
        "",
        "rollback",
    ),
    Mutant(
        "0005",
        "prefix-at-least",
        LOAF,
        "        if running == product:",
        "        if running >= product:",
        "bound",
    ),
    Mutant(
        "0005",  # 0015's merge to fuse, behind 0005's flag
        "merge-outside-rollback",
        LOAF,
        "    if not _nodes_under_rollback_scope(node1, node2):\n        return False\n",
        "",
        "rollback",
        equivalent="merge_loops merges loops in their visiting order: a merge made "
        "while fusion pairs are ranked changes loop shapes, not values",
    ),
    # 0006 no local buffer under a tiled outer level
    Mutant(
        "0006",
        "check-removed",
        RETILE,
        "        level.steps != 1\n",
        "        level.steps != level.steps\n",
        "check",
    ),
    Mutant(
        "0006",
        "one-level-fewer",
        RETILE,
        "for level in (_outer_levels(proxy, depth) or ())",
        "for level in (_outer_levels(proxy, depth - 1) or ())",
        "bound",
    ),
    Mutant(
        "0006",
        "first-kernel-skipped",
        RETILE,
        "        for proxy in proxies\n        for level in",
        "        for proxy in proxies[1:]\n        for level in",
        "bound",
        equivalent="the check runs after the kernels' outer levels were "
        "compared (stock's check_outer_fusion_loop_level_attr, pair by pair, or "
        "OuterLoopRetile.accepts, each against the first) on var, size, offset "
        "and steps at every fused level, and an outer-loop fused node has at "
        "least two members (OuterLoopFusedSchedulerNode.fuse joins two nodes; "
        "0012 regroups only nodes of more than two, 0018 keeps the members): "
        "the first kernel tiles a fused level only where the second does too",
    ),
    # 0007 erf realized
    Mutant(
        "0007",
        "nothing-realized",
        COSTS,
        "return not EXPENSIVE_TO_RECOMPUTE.isdisjoint(used_ops)",
        "return False",
        "check",
        cost_only="realizing or inlining a value computes the same value",
    ),
    Mutant(
        "0007",
        "everything-realized",
        COSTS,
        "return not EXPENSIVE_TO_RECOMPUTE.isdisjoint(used_ops)",
        "return True",
        "check",
        cost_only="realizing or inlining a value computes the same value",
    ),
    Mutant(
        "0007",
        "erf-not-listed",
        COSTS,
        'frozenset({"erf", "erfc", "erfinv", "expm1"})',
        'frozenset({"erfc", "erfinv", "expm1"})',
        "bound",
        cost_only="realizing or inlining a value computes the same value",
    ),
    # 0008 accumulators
    Mutant(
        "0008",
        "tail-kernel-rotates",
        ACC,
        "    if count <= 1 or kernel.tail_size:",
        "    if count <= 1:",
        "check",
        equivalent="stock emits the main kernel's declarations and final combine "
        "only; the tail's rotation moves partial results between slots that are "
        "all combined after the loop",
    ),
    Mutant(
        "0008",
        "one-slot-not-combined",
        ACC,
        "    combined = acc\n    for slot in slots:",
        "    combined = acc\n    for slot in slots[1:]:",
        "bound",
    ),
    Mutant(
        "0008",
        "rotation-drops-a-slot",
        ACC,
        "{moves} {slots[-1]} = rotated; }}",
        "{moves} }}",
        "bound",
    ),
    Mutant(
        "0008",
        "welford-rotates",
        ACC,
        'ROTATABLE_REDUCTIONS = ("sum", "max", "min")',
        'ROTATABLE_REDUCTIONS = ("sum", "max", "min", "welford_reduce")',
        "check",
        equivalent="the slots are Welford states (mean, m2, weight, index), each "
        "update reads the reciprocal weight at its own slot's index, and "
        "welford_combine of two states after the loop is the exact merge: "
        "rotating them changes rounding only (var_mean over (8, 1500) and "
        "LayerNorm(1500), Welford rows, rotate and agree)",
    ),
    # 0009 outer-block fusion
    # a template member has no loop body (CPU flex attention before a
    # consumer that shares its outer loops): its accesses are unknown
    Mutant(
        "0009",
        "template-body-skipped",
        BLOCK,
        "        if body is None:\n            return None\n",
        "        if body is None:\n            continue\n",
        "check",
        equivalent="a template's accesses skipped are none: a producer with no "
        "block writes shares no buffer by block (score 0, as for None), and "
        "can_fuse_vertical_outer_loop refuses a template on either side",
    ),
    # symbolic sizes: the bytes a pair reads never fit the cache (a softmax
    # over channels plus a gather, dynamic shapes)
    Mutant(
        "0009",
        "symbolic-bytes-fit",
        BLOCK,
        "            return 1 << 62  # symbolic: never fits",
        "            return 0  # symbolic: never fits",
        "bound",
        cost_only="whether the bytes fit the cache chooses whether a block "
        "fusion that 0009's checks found legal is made, not its values",
    ),
    Mutant(
        "0009",
        "read-one-past-block",
        BLOCK,
        "bounds.upper <= block - 1",
        "bounds.upper <= block",
        "bound",
    ),
    Mutant(
        "0009",
        "outer-coefficients-not-compared",
        BLOCK,
        "if write.outer_sizes != read.outer_sizes or write.outer_coeffs != "
        "read.outer_coeffs:",
        "if write.outer_sizes != read.outer_sizes:",
        "check",
    ),
    Mutant(
        "0009",
        "overlapping-blocks",
        BLOCK,
        "        if int(coeff) < span:\n            return False",
        "        if int(coeff) < span // 2:\n            return False",
        "bound",
        equivalent="a store's index is injective over its loops (an output "
        "layout), so an outer stride below its dense block's span needs an outer "
        "loop of one iteration, where fusing cannot reorder anything",
    ),
    Mutant(
        "0009",
        "sparse-block-written",
        BLOCK,
        "        if stride != expected:\n            return None\n",
        "",
        "check",
    ),
    Mutant(
        "0009",
        "mutation-allowed",
        BLOCK,
        "                return False  # a mutation or an opaque read of the block",
        "                continue  # a mutation or an opaque read of the block",
        "check",
    ),
    # 0010 invariant loads
    Mutant(
        "0010",
        "inner-variable-invariant",
        INV,
        "                or loop.var in candidate.index.free_symbols\n",
        "",
        "check",
    ),
    Mutant(
        "0010",
        "written-memory-moved",
        INV,
        "                or memory_of_buffer(args, candidate.name) in written\n",
        "",
        "check",
        equivalent="no kernel loads at an invariant index memory that it "
        "stores: a node fused after a writer reads the written index (vertical "
        "fusion needs matching deps; 0009's block-wise members run in inner "
        "loops of their own), a mutated input is written through a temporary "
        "and copied back, and in-place reuse needs every read of the reused "
        "buffer at the written index (NodeUser.can_inplace, merged over reads)",
    ),
    Mutant(
        "0010",
        "second-innermost-loop",
        INV,
        "    if not candidates or depth != len(loop_nest.loops) - 1:",
        "    if not candidates or depth != len(loop_nest.loops) - 2:",
        "bound",
    ),
    Mutant(
        "0010",
        "aliases-not-resolved",
        INV,
        "    return inplaced.inner_name if isinstance(inplaced, InplacedBuffer)"
        " else name",
        "    return name",
        "check",
        equivalent="an in-place pair shares its memory only when the reusing "
        "node reads the reused buffer at the written index alone "
        "(NodeUser.can_inplace) and is its last user, so no load of the partner's "
        "name in the kernel is invariant: resolving aliases changes no decision",
    ),
    Mutant(
        "0010",
        "masked-body-hoisted",
        INV,
        "                candidate.buffer is not kernel.loads"
        "  # a masked body, a suffix\n"
        "                or ",
        "                ",
        "check",
    ),
    # 0011 block local buffers
    Mutant(
        "0011",
        "reader-with-more-loops",
        LOCAL,
        "            if depth + len(read.inner_ranges) > writer_vars:\n"
        "                return None  # a loop variable the index rewriting would zero",
        "            if depth + len(read.inner_ranges) > writer_vars + 1:\n"
        "                return None  # a loop variable the index rewriting would zero",
        "bound",
    ),
    Mutant(
        "0011",
        "block-size-unchecked",
        LOCAL,
        "    if math.prod(inner_sizes) != block:\n        return None\n",
        "",
        "check",
        equivalent="a dense block is the product of the ranges of the variables "
        "its store index uses, and a pointwise writer's store uses every inner "
        "variable of range above 1 (its loops are its output's sizes, and an "
        "index that skipped one would write an element twice): the product of "
        "the inner ranges is the block whenever the block is dense",
    ),
    Mutant(
        "0011",
        "users-outside-the-fusion",
        LOCAL,
        "    if not output.users or any(",
        "    if not output.users or all(",
        "check",
    ),
    Mutant(
        "0011",
        "reads-outside-block",
        LOCAL,
        "            if not same_block(write, read):\n                return None\n",
        "",
        "check",
        equivalent="every read it checks was checked when its reader joined the "
        "fusion: by 0009's buffers_shared_by_block (_in_block: same_block, or 0019's "
        "same_digit_block, which for the dense write _block_sizes requires "
        "composes the read of the write's digits within their ranges, so inside "
        "[0, S) at the same base) or by stock's vertical check (equal deps: the "
        "same index). Later depths keep it: 0005's merge keeps the fused levels' "
        "product, so the blocks, and 0018's shallower depth joins whole blocks, "
        "in which a write dense at that depth keeps every read",
    ),
    # 0012 regroup
    # a fallback that keeps a buffer local removes it from the graph; the
    # kernel group must not name it as an output (the bfloat16 softmax of
    # (4, 4, 1), every op its own node, dynamic shapes: a regrouped head)
    Mutant(
        "0012",
        "removed-output-kept",
        FALLBACKS,
        "            args.output_buffers[name] = REMOVED\n",
        "            pass\n",
        "other",
    ),
    Mutant(
        "0012",
        "two-member-nodes",
        REGROUP,
        "    if len(members) <= 2:",
        "    if len(members) <= 1:",
        "bound",
        equivalent="a node of two members regrouped is a one-member outer-loop node "
        "(its first member alone), then the last: stock's fallback",
    ),
    Mutant(
        "0012",
        "member-dropped",
        REGROUP,
        "node.scheduler, members[:-1], node.outer_loop_fusion_depth",
        "node.scheduler, members[:-2], node.outer_loop_fusion_depth",
        "bound",
    ),
    Mutant(
        "0012",
        "last-member-not-emitted",
        REGROUP,
        "    codegen_alone(scheduling, members[-1])\n",
        "",
        "other",
    ),
    Mutant(
        "0012",
        "last-member-first",
        REGROUP,
        "    scheduling.codegen_outer_loop_node(head)\n"
        "    codegen_alone(scheduling, members[-1])\n",
        "    codegen_alone(scheduling, members[-1])\n"
        "    scheduling.codegen_outer_loop_node(head)\n",
        "other",
    ),
    # 0013 streaming stores
    Mutant(
        "0013",
        "read-back-streamed",
        STREAM,
        "        if is_buffer_removed(name) or memory_of_buffer(args, name) in read:",
        "        if is_buffer_removed(name):",
        "check",
        equivalent="a kernel can read back only what the same thread stored "
        "(another thread's elements in the same loop nest would race in stock "
        "code too), and a thread sees its own non-temporal stores in order",
    ),
    Mutant(
        "0013",
        "half-aligned-avx512",
        HELPERS,
        "(reinterpret_cast<std::uintptr_t>(ptr) & 63) == 0",
        "(reinterpret_cast<std::uintptr_t>(ptr) & 31) == 0",
        "bound",
    ),
    Mutant(
        "0013",
        "any-dtype",
        STREAM,
        "            _dtype(n) == torch.float32 and buffer_bytes(n) >= min_bytes"
        " for n in names",
        "            buffer_bytes(n) >= min_bytes for n in names",
        "check",
        equivalent="store_line wraps float32 stores only, and the names that "
        "share a streamed store's memory (in-place partners, mutations) have "
        "its dtype: Inductor reuses a buffer in place only for the same "
        "buffer_reuse_key (device, dtype, size)",
    ),
    Mutant(
        "0013",
        "regions-not-fenced",
        STREAM,
        "    for fence in fences:\n        fence.on = True\n",
        "",
        "other",
        equivalent="on x86, the only ISAs that stream, the closing barrier "
        "of an omp parallel region is made of locked instructions, which "
        "non-temporal stores do not pass (Intel SDM 8.2.2); the kernel's own "
        "final fence stays: the fences are what the C++ memory model needs, no "
        "value on these CPUs shows them",
    ),
    # 0014 prefetch
    # a template's kernel is rendered before the scheduler exists (CPU flex
    # attention): the output check must not ask it
    Mutant(
        "0014",
        "scheduler-assumed",
        PREFETCH,
        "    if V.graph.scheduler:\n        name = V.graph.scheduler.mutation_",
        "    if True:\n        name = V.graph.scheduler.mutation_",
        "check",
    ),
    Mutant(
        "0014",
        "symbolic-step",
        PREFETCH,
        "    if not isinstance(outer.steps, (int, sympy.Integer)):\n"
        "        return False  # a symbolic step (dynamic shapes)\n",
        "",
        "check",
        equivalent="a dead guard: a loop level's step is 1 or what "
        "LoopLevel.tile sets, sympy.Integer of the vector tiling factor, with "
        "dynamic shapes too (the only assignment of steps in codegen/cpp.py)",
    ),
    Mutant(
        "0014",
        "index-of-another-loop",
        PREFETCH,
        "        if _same_loop(kernel.inner[0], kernel.inner[-1]) and rows.uses_only(\n"
        "            load.index, kernel.inner[-1].loops[-1].var\n"
        "        ):",
        "        if True:",
        "check",
    ),
    Mutant(
        "0014",
        "slot-outside-the-loop",
        PREFETCH,
        "        return slot if slot is not None and slot.buffer is k.loads else None",
        "        return slot",
        "check",
        equivalent="generate_vector_load makes a slot before an unmasked "
        "contiguous float vector load along the kernel's innermost loop "
        "variable; the only load buffers of a vector kernel other than its "
        "loads are a masked body (whose loads carry the mask: never a "
        "candidate), the reduction suffix (its indices lack the innermost, "
        "reduction variable: no load there is contiguous along it) and "
        "indirect_load's compute buffer, printed in the same loop body: the "
        "slot's prefetches, of the innermost and fused loops' variables only, "
        "print inside the loop either way, and a prefetch changes no value",
    ),
    Mutant(
        "0014",
        "half-distance",
        PREFETCH,
        "        row_bytes = stride * self.step * 4  # float32",
        "        row_bytes = stride * self.step * 2  # float32",
        "bound",
        cost_only="a prefetch's distance changes no value",
    ),
    # 0015's loop merges: a template member (CPU flex attention whose
    # score_mod reads a bias a pointwise node reads too) has no loop body;
    # an outer-loop fusion over all its loops (GroupNorm's statistics over a
    # channels-last map) whose members merge apart
    Mutant(
        "0015",
        "template-members-merged",
        LOAF,
        "    if len(snodes) != len(node.get_nodes()) or any(\n"
        "        sn.is_template() or sn.loop_body is None for sn in snodes\n    ):",
        "    if len(snodes) != len(node.get_nodes()):",
        "check",
    ),
    Mutant(
        "0015",
        "outer-members-merged-apart",
        LOAF,
        "    if not _merge_members_together(snodes):\n        return False\n"
        "    node.outer_loop_fusion_depth",
        "    _merge_members_together(snodes)\n    node.outer_loop_fusion_depth",
        "check",
        cost_only="members with the same iteration sizes merge alike (each "
        "merged over the indices of all), so _merge_members_together fails only "
        "on members whose sizes differ before any merge, which it leaves as "
        "they were (the caller's restored fused loops, stock's): the mutant "
        "keeps them, where the overlay goes on to merge each member below the "
        "fused levels, a refactoring of the same visiting order (GroupNorm's "
        "statistics over a channels-last map: members of 3072 and of 32 "
        "rows, the same kernels)",
    ),
    # 0015 fusion rules for loops left open until fusion
    Mutant(
        "0015",
        "reduction-first-any-pointwise",
        LOAF,
        "    return bool(reduce1) and reduce2 == () and tuple(vars2) == "
        "tuple(vars1) + tuple(\n        reduce1\n    )",
        "    return bool(reduce1) and reduce2 == ()",
        "check",
    ),
    Mutant(
        "0015",
        "groups-fuse-by-rank",
        LOAF,
        "or (not reduce1 and vars1 == vars2 + reduce2)",
        "or (not reduce1 and len(vars1) == len(vars2 + reduce2))",
        "bound",
        equivalent="a merge rewrites a node's loops in their visiting order, every "
        "member alike (_merged_group refuses members that merge apart): merged "
        "nodes compute what they did, as stock's CPU nodes, all merged, do. The "
        "mutant only merges more pairs, whose merged groups the group rules then "
        "refuse: can_fuse rejects them (its tracker undoes the merge) or fuses "
        "them by a rule that reads merged groups as it reads stock's (outer-loop "
        "or block fusion)",
    ),
    Mutant(
        "0015",
        "members-merged-apart",
        LOAF,
        "    return group if all(g in accepted for g in groups) else None",
        "    return group",
        "check",
    ),
    Mutant(
        "0015",
        "merged-without-group-check",
        LOAF,
        "    if not _groups_fuse(*merged):\n        return False\n",
        "",
        "rollback",
    ),
    # 0017 unrolled loops for rotating accumulators
    Mutant(
        "0017",
        "parallel-loop-unrolled",
        ACC,
        "    if loop.parallel or loop.collapsed:",
        "    if loop.collapsed:",
        "check",
    ),
    Mutant(
        "0017",
        "collapsed-loop-unrolled",
        ACC,
        "    if loop.parallel or loop.collapsed:",
        "    if loop.parallel:",
        "check",
    ),
    Mutant(
        "0017",
        "pragma-after-for",
        ACC,
        "    return [*loop_lines[:-1], pragma, loop_lines[-1]]",
        "    return [*loop_lines, pragma]",
        "bound",
    ),
    Mutant(
        "0017",
        "outer-loop-unrolled",
        ACC,
        "    if depth != len(loop_nest.loops) - 1 or not loop.simd_vec:",
        "    if depth != len(loop_nest.loops) - 2 or not loop.simd_vec:",
        "bound",
        cost_only="an unroll pragma right before a for statement changes how "
        "the loop compiles, not what it computes; here only which loop gets it",
    ),
    # 0018 shallower merge: its legality is 0002's acceptance at the shallow
    # depth; the mutant that checks one level too few is the one that can
    # change values, the guards only choose between correct kernels
    Mutant(
        "0018",
        "one-level-unchecked",
        SHALLOW,
        "        attempt = ShallowerFusion(shallow, vectorized)\n",
        "        attempt = ShallowerFusion(shallow, vectorized)\n"
        "        attempt.depth -= 1\n",
        "bound",
    ),
    Mutant(
        "0018",
        "threads-unchecked",
        SHALLOW,
        "        if not balances_over_threads(outer):",
        "        if False:",
        "check",
        cost_only="how many threads share the fused loop, not what it computes",
    ),
    Mutant(
        "0018",
        "parallel-inner-loops-ignored",
        SHALLOW,
        "    if not OuterLoopRetile(node, vectorized).keeps_parallelism("
        "stock_proxies):",
        "    if False:",
        "check",
        cost_only="which loop runs in parallel, not what the kernels compute",
    ),
    Mutant(
        "0018",
        "partial-stock-attempt",
        SHALLOW,
        "    if len(stock_proxies) != len(members):\n        return",
        "    if not stock_proxies:\n        return",
        "rollback",
        cost_only="the stock attempt's kernels only feed the vector-work guard; "
        "every shallower attempt is generated and checked anew",
    ),
    # 0019's block checks on reads and writes that only tiles compose, each
    # with the seed that takes the branch: a read shifted by one element, a
    # read row stride no write stride divides, a write row stride that is
    # symbolic (a cat with an input of dynamic width)
    Mutant(
        "0019",
        "constant-remainder-ignored",
        TILES,
        "            if value:\n                return False\n",
        "",
        "check",
    ),
    Mutant(
        "0019",
        "any-stride-divides",
        TILES,
        "        divisors = [s for s, _ in by_stride if int(coeff) % s == 0]",
        "        divisors = [s for s, _ in by_stride]",
        "check",
    ),
    # Survives its seed.  Symbolic row strides (every read carries the same
    # term, which _composed_of refuses) and constant offsets (only a
    # mutation's store has one, and no read names its buffer) cannot kill it;
    # a write whose index keeps a floor or modulo after a reindexing might,
    # and no such program has been built.
    Mutant(
        "0019",
        "non-loop-term-skipped",
        TILES,
        "        if var not in ranges or var in seen or not coeff.is_Integer or "
        "coeff <= 0:\n            return None\n",
        "        if var not in ranges or var in seen or not coeff.is_Integer or "
        "coeff <= 0:\n            continue\n",
        "check",
    ),
    # statistics left with a loop too many by the merge (rows padded by one
    # element), and a second consumer asked while they are tiled
    Mutant(
        "0019",
        "unmerged-pixels-fused",
        TILES,
        "    if sizes is None or len(sizes) != depth + 1:\n        return False\n"
        "    node.outer_loop_fusion_depth = depth + 1",
        "    if sizes is None:\n        return False\n"
        "    node.outer_loop_fusion_depth = depth + 1",
        "check",
        cost_only="statistics whose pixels did not merge to one loop are "
        "fused over the shared loops and the tile index only, their other "
        "pixel loops inside (a shallower outer-loop fusion of members that "
        "agree pixel by pixel), and the consumer joins where "
        "block_fusion_score_at's checks at that depth hold: other loops, the "
        "same values (softmax spelled out over rows padded by one element "
        "is one nest with the mutant, two without, and agrees)",
    ),
    Mutant(
        "0019",
        "extended-depth-unchecked",
        TILES,
        "    if backend.outer_loop_fusion_depth(node1, node2) != depth:\n"
        "        return 0\n",
        "",
        "check",
        equivalent="node1 is an outer-loop fused node and depth its fusion "
        "depth (_tiled_statistics_score; _fuse_merged_pixels sets it before the "
        "extended score), so the backend's depth for the pair is that depth or "
        "0 (_get_outer_loop_fusion_depth); at 0 a positive score still meets "
        "can_fuse_vertical, which refuses: node1 reduces (no element-wise "
        "fusion), and the split needs a pointwise consumer whose loops differ "
        "from node1's within the depth, where the block check compared them "
        "equal",
    ),
    Mutant(
        "0019",
        "symbolic-pair-cached",
        TILES,
        "        if not isinstance(numel, (int, sympy.Integer)):\n"
        "            return False\n        touched",
        "        if not isinstance(numel, (int, sympy.Integer)):\n"
        "            return True\n        touched",
        "bound",
        cost_only="a pair kept as cached only refuses the extension over "
        "tiles, which keeps the fusion made so far",
    ),
    # 0019 outer-block tiles: its legality is 0009's checks on the tiled
    # loops, with same_digit_block for blocks that are not one dense range
    Mutant(
        "0019",
        "read-one-past-digit",
        TILES,
        "bounds.upper > sizes[stride] - 1:",
        "bounds.upper > sizes[stride]:",
        "bound",
    ),
    Mutant(
        "0019",
        "overlapping-digits",
        TILES,
        "        if stride < reach:\n            return False\n",
        "",
        "check",
        equivalent="every write it sees is the tiled body of a write that "
        "0009 found dense within disjoint blocks before tiling "
        "(block_fusion_refused_for_size), or, for one image tiled at depth 0, "
        "of a buffer's store in its own layout, one element per index (a "
        "mutation is refused before); tiling splits the pixel digit "
        "(stride s, range P) into tile index (s*T, P/T) and lane (s, T), "
        "which overlap nothing",
    ),
    Mutant(
        "0019",
        "lane-and-tile-swapped",
        TILES,
        "tile_index * tile + lane]",
        "lane * tile + tile_index]",
        "other",
        # a double fault: the swapped index overlaps the channel digit,
        # which the overlap check alone refuses
        also=(("        if stride < reach:\n            return False\n", ""),),
    ),
    # 0019 requires 0012's regroup, which a statistics join whose merge
    # fails wants; the seed program without outer_loop_regroup meets it
    Mutant(
        "0019",
        "join-without-regroup",
        REQUIREMENTS,
        '"outer_block_tiles": ("outer_block_fusion", "outer_loop_regroup"),',
        '"outer_block_tiles": ("outer_block_fusion",),',
        "check",
        cost_only="a join whose merge fails without the regroup falls back to "
        "stock's kernels, one per member: the values stay right (the seed "
        "program without outer_loop_regroup agrees with the mutant)",
    ),
    Mutant(
        "0019",
        "refused-tiling-kept",
        TILES,
        "    saved.restore()\n    return 0\n",
        "    return 0\n",
        "rollback",
        cost_only="a refused tiling leaves each node's loops re-expressed over "
        "the same elements; later fusion decisions check the tiled loops",
    ),
    Mutant(
        "0019",
        "statistics-joined-unchecked",
        TILES,
        "    return block_fusion_score_at(scheduler, node1, node2, depth)\n",
        "    return bytes_read(node2)\n",
        "check",
        # a double fault: the untiled pair's reads are checked first
        also=(
            (
                "    if not buffers_shared_by_block(scheduler, node1, node2, depth):\n"
                "        return None\n    return depth\n",
                "    return depth\n",
            ),
        ),
    ),
    # 0020 outer-block prepend: its legality is 0009's checks on the split
    # producer; the split itself must keep every element where it was
    Mutant(
        "0020",
        "inner-one-too-many",
        PREPEND,
        "inner = merged[0] // blocks\n",
        "inner = merged[0] // blocks + 1\n",
        "bound",
        equivalent="0009's checks run on the split producer: with an inner "
        "loop one too long its write's outer stride is no longer the reads' "
        "(S*g + k against (S+1)*g + k), so same_block refuses the pair and "
        "the split is undone",
    ),
    Mutant(
        "0020",
        "split-digits-reversed",
        PREPEND,
        "flat = flat * size + var",
        "flat = flat + var * size",
        "other",
        equivalent="0009's checks run on the split producer: the mutated "
        "index gives the inner loop (extent > 1, or no split is made) the "
        "stride of its own extent, so the write is not dense in its block "
        "(dense_block_size) and the pair is refused, the split undone",
    ),
    Mutant(
        "0020",
        "front-join-of-a-block-fusion",
        PREPEND,
        "    ):\n        return False  # a block fusion: "
        "scheduling/block_fusion.py extends it\n",
        "    ):\n        pass\n",
        "check",
        equivalent="a producer joining a block fusion in front is checked by "
        "0009's block_fusion_score_at over every member's reads, as when 0009 "
        "extends that fusion itself; the check only keeps 0009's own path first",
    ),
    Mutant(
        "0020",
        "first-member-merged",
        PREPEND,
        "static_iter_sizes(node1) if leaves_of_one_space(node1) is not None else None",
        "static_iter_sizes(node1)",
        "check",
    ),
    Mutant(
        "0020",
        "refused-split-kept",
        PREPEND,
        "        )\n        return score\n    saved.restore()\n    return 0\n",
        "        )\n        return score\n    return 0\n",
        "rollback",
        cost_only="a refused split leaves the producer's loop re-expressed over "
        "the same elements; later fusion decisions check the split loops",
    ),
    # a failed prepended merge: the first member is generated alone, then
    # the rest (erf before a sum of two columns, or before a softmax over
    # strided columns, on 2 threads)
    Mutant(
        "0020",
        "prepended-member-dropped",
        PREPEND,
        "    codegen_alone(scheduling, members[0])\n",
        "",
        "other",
    ),
    Mutant(
        "0020",
        "rest-but-first-dropped",
        PREPEND,
        "    if len(rest) == 1:\n        codegen_alone(scheduling, rest[0])\n",
        "    if len(rest) >= 1:\n        codegen_alone(scheduling, rest[0])\n",
        "other",
    ),
    # 0021 softmax by reciprocal: the decomposition must keep the core one's
    # max subtraction (the reciprocal's range rests on it), dim and dtypes
    Mutant(
        "0021",
        "max-not-subtracted",
        SOFTMAX,
        "torch.exp(x - core._softmax_unbacked_safe_amax(x, dim))",
        "torch.exp(x)",
        "check",
    ),
    Mutant(
        "0021",
        "sum-over-last-dim",
        SOFTMAX,
        "unnormalized.sum(dim, keepdim=True)",
        "unnormalized.sum(-1, keepdim=True)",
        "other",
    ),
    Mutant(
        "0021",
        "dtype-not-restored",
        SOFTMAX,
        "return result if half_to_float else result.to(result_dtype)",
        "return result",
        "other",
    ),
    # 0022 group norm by channel sums: the group's variance must add the
    # spread of its channels' means, the squared deviations must be from each
    # channel's mean, and the result must keep the input's dtype
    # a GroupNorm of 16 pixels or fewer takes them all as one block (the
    # seed program without affine parameters)
    Mutant(
        "0022",
        "few-pixels-one-short",
        GROUP_NORM,
        "    if pixels <= GROUP_NORM_PIXEL_BLOCK:\n        return pixels\n",
        "    if pixels <= GROUP_NORM_PIXEL_BLOCK:\n        return pixels - 1\n",
        "bound",
    ),
    Mutant(
        "0022",
        "spread-of-channel-means-dropped",
        GROUP_NORM,
        "(within + between) / (pixels * (c // groups))",
        "within / (pixels * (c // groups))",
        "other",
    ),
    Mutant(
        "0022",
        "deviations-not-from-channel-mean",
        GROUP_NORM,
        "deviation = blocks - mean[:, None, None, :]",
        "deviation = blocks",
        "other",
    ),
    Mutant(
        "0022",
        "dtype-not-restored",
        GROUP_NORM,
        "return out.to(input.dtype), mean.to(input.dtype), rstd.to(input.dtype)",
        "return out, mean.to(input.dtype), rstd.to(input.dtype)",
        "other",
    ),
    # 0023 outer reduction blocks: only reductions whose partial results
    # combine by the same reduction may split (an argmax of block argmaxes
    # returns an index inside a block; Welford's partials need its combine)
    Mutant(
        "0023",
        "argmax-splits",
        OUTER_BLOCKS,
        _SPLITTABLE,
        _SPLITTABLE.replace('"any"}', '"any", "argmax"}'),
        "check",
    ),
    Mutant(
        "0023",
        "argmin-splits",
        OUTER_BLOCKS,
        _SPLITTABLE,
        _SPLITTABLE.replace('"any"}', '"any", "argmin"}'),
        "check",
    ),
    Mutant(
        "0023",
        "welford-splits",
        OUTER_BLOCKS,
        _SPLITTABLE,
        _SPLITTABLE.replace('"any"}', '"any", "welford_reduce"}'),
        "check",
        equivalent="the hook sits in Reduction.create, and a Welford "
        "reduction is created by WelfordReduction.create, which never calls "
        "it: the list guards against a future caller, no program reaches it",
    ),
    # the third reach pass: a split asked when fusion pairs are ranked, a
    # prepended split refused for its depth, tiled statistics asked again
    # after a refused fusion, an outer-loop fusion a partner asks to merge.
    # All four survive their seeds.  The first three are argued cost-only,
    # the prepend's with one gap (an outer-loop fusion whose members came to
    # share one pointwise loop space after it was formed would pass the split
    # check; no route to one is known).  The last leaves the depth stale
    # until merge_loops_consistently sets it again; no program yet shows a
    # decision taken in between go wrong, and it is not argued.  Its seed
    # compiles to one nest with it against two without, and agrees; so do
    # 23 variants (the seed's program and 5 with other partners and
    # consumers of its statistics, each with 0003's split on and off, in the
    # default and seed configs).
    Mutant(
        "0003",
        "split-applied-when-ranked",
        SPLIT,
        "    if not under_rollback_scope(leaves):\n        return True\n"
        "    _apply_split",
        "    _apply_split",
        "rollback",
        cost_only="a split reindexes the consumer's loops into a factorization "
        "of the same iterations, each computing what it did: applied when the "
        "pairs are ranked and never rolled back, it changes the consumer's "
        "loops and what fuses with them, not a value",
    ),
    Mutant(
        "0020",
        "prepend-depth-unchecked",
        PREPEND,
        "        if _fusion_depth(scheduler, node1, node2) == depth:\n"
        "            score = block_fusion_score_at",
        "        if True:\n            score = block_fusion_score_at",
        "check",
        cost_only="the backend's depth for the split producer and the "
        "outer-loop fusion it joins is that fusion's depth or 0 "
        "(_get_outer_loop_fusion_depth: an outer-loop fused node2 gives its own "
        "depth or none; a plain node2 whose loops are the split's outer ones "
        "gives their number); at 0 a positive score still meets the backend's "
        "can_fuse_vertical, which refuses (no element-wise fusion with an "
        "outer-loop fused node, no outer loop, and 0003's split takes no "
        "consumer with reductions or of members joined by block), and the "
        "tracker undoes the split: only the pair's retry by reindexing, which "
        "the positive score skips, and the refusal cache differ",
    ),
    Mutant(
        "0019",
        "untiled-statistics-scored",
        TILES,
        "    if sizes is None or depth != len(sizes) - 1 or depth < 1:\n"
        "        return 0\n    return _extended_fusion_score",
        "    if sizes is None or depth < 1:\n"
        "        return 0\n    return _extended_fusion_score",
        "check",
        cost_only="statistics whose tiled flag outlived a refused fusion "
        "(loops rolled back, the flag not) are scored at their own fusion "
        "depth: positive only where the backend fuses the pair over that many "
        "loops and block_fusion_score_at finds every read of their outputs in "
        "its block, so the consumer joins an element-wise outer-loop fusion "
        "block by block, which 0009 declines for its codegen fallback's cost "
        "(one nest per member, in order), not for its values; the tile path "
        "is then not tried (the seed: statistics over (2, 32, 32) at depth 3, "
        "the consumer's loops reordered to (2, 32, 32, 48): backend depth 3, "
        "block score 0: the pair goes on as without the mutant)",
    ),
    Mutant(
        "0015",
        "outer-loop-fusion-merged-for-a-partner",
        LOAF,
        "    if isinstance(node, OuterLoopFusedSchedulerNode):\n"
        "        # Merging its members",
        "    if False:\n        # Merging its members",
        "check",
    ),
)

# The mutants of the running torch's series: a feature stock has caught up
# with (0006 from 2.14.1 on) keeps its module code but no caller, so its
# mutants could not be killed.
_SERIES = set(series_patches())
MUTANTS = tuple(m for m in ALL_MUTANTS if m.feature in _SERIES)


class StaleMutant(Exception):
    """The mutant's original text is not found exactly once in the installed file."""


def mutated_source(mutant: Mutant, root: Path | None = None) -> str:
    """The installed module's text with the mutant applied; StaleMutant if stale."""
    path = (root or site_root()) / mutant.path
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise StaleMutant(f"{mutant.ident}: {mutant.path} is not installed") from None
    for original, mutated in ((mutant.original, mutant.mutated), *mutant.also):
        count = text.count(original)
        if count != 1:
            raise StaleMutant(
                f"{mutant.ident}: its original text occurs {count} times in "
                f"{mutant.path} (expected once): update the mutant"
            )
        text = text.replace(original, mutated)
    return text


_SITECUSTOMIZE = """\
# Generated by tools/fuzz/mutants.py: import {module} from {path}.
import importlib.abc
import importlib.util
import sys


class MutantFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == {module!r}:
            return importlib.util.spec_from_file_location(fullname, {path!r})
        return None


sys.meta_path.insert(0, MutantFinder())
"""


def shadow_env(mutant: Mutant, directory: Path, root: Path | None = None) -> dict:
    """Environment whose Python imports the mutated module instead of the
    installed one (a sitecustomize on PYTHONPATH); StaleMutant if stale."""
    source = mutated_source(mutant, root)
    directory.mkdir(parents=True, exist_ok=True)
    module_file = directory / f"mutant_{Path(mutant.path).name}"
    module_file.write_text(source)
    (directory / "sitecustomize.py").write_text(
        _SITECUSTOMIZE.format(module=mutant.module, path=str(module_file))
    )
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), str(REPO_ROOT)]),
    }


@dataclasses.dataclass
class Outcome:
    ident: str
    feature: str
    kind: str
    status: str  # killed | survived | stale | error
    seconds: float = 0.0
    programs: int = 0
    reached: int = 0  # programs whose kernels the mutated feature changed
    detail: str = ""
    cost_only: str = ""
    equivalent: str = ""


def _examples(run_dir: Path) -> list[dict]:
    records = []
    for path in sorted(run_dir.glob("worker*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return [r for r in records if r.get("type") == "example"]


def run_one(
    mutant: Mutant | None,
    out: Path,
    *,
    seconds: float,
    seed: int,
    profile: str,
    examples: int | None = None,
    log=print,
) -> Outcome:
    """Fuzz with ``mutant`` (None: the control) until a failure, ``seconds``
    or ``examples`` programs.  Every run of one report shares the flags-off
    store (``check.FLAGS_OFF_STORE_ENV``) and the fuzzer's kept Inductor
    cache: with the control's seed, a mutant draws the control's programs
    (until it fails), loads their flags-off results, and compiles with g++
    only the flags-on modules whose C++ it changed."""
    ident = mutant.ident if mutant else "control"
    work = out / ident
    run_dir, repro_dir = work / "run", work / "repros"
    feature = mutant.feature if mutant else ""
    outcome = Outcome(
        ident,
        feature,
        mutant.kind if mutant else "",
        "error",
        cost_only=mutant.cost_only if mutant else "",
        equivalent=mutant.equivalent if mutant else "",
    )
    shutil.rmtree(work, ignore_errors=True)  # fresh run and repro directories
    work.mkdir(parents=True)
    try:
        env = (
            shadow_env(mutant, work / "shadow")
            if mutant
            else {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        )
    except StaleMutant as exc:
        outcome.status, outcome.detail = "stale", str(exc)
        return outcome
    env["FUZZ_FLAGS_OFF_STORE"] = str(out / "flags-off")  # check.FLAGS_OFF_STORE_ENV
    cmd = [
        sys.executable,
        "-m",
        "tools.fuzz",
        "run",
        "--profile",
        profile,
        "--workers",
        "1",
        "--seed",
        str(seed),
        "--seconds",
        str(seconds),
        "--out",
        str(run_dir),
        "--repro-dir",
        str(repro_dir),
        "--no-shrink",
    ]
    if examples:
        cmd += ["--examples", str(examples)]
    start = time.time()
    with (work / "fuzz.log").open("w") as log_file:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        failed = None
        while proc.poll() is None:
            time.sleep(2.0)
            failed = next(
                (r for r in _examples(run_dir) if r["status"] == "ours"), None
            )
            if failed is not None or time.time() - start > seconds + 240:
                os.killpg(proc.pid, signal.SIGTERM)  # the first failure is enough
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                break
    records = _examples(run_dir)
    failed = failed or next((r for r in records if r["status"] == "ours"), None)
    outcome.seconds = round(time.time() - start, 1)
    outcome.programs = sum(1 for r in records if r["status"] != "invalid")
    if feature:
        outcome.reached = sum(
            1 for r in records if r.get("stats", {}).get("reach", {}).get(feature)
        )
    if failed is not None:
        outcome.status = "killed"
        outcome.detail = f"{failed['kind']}: {failed['message'][:300]}"
    elif proc.returncode not in (0, None) and proc.returncode != -signal.SIGTERM:
        text = (work / "fuzz.log").read_text()
        crashed = "crashed workers" in text
        outcome.status = "killed" if crashed else "error"
        outcome.detail = (
            "a worker died" if crashed else f"fuzz exit code {proc.returncode}"
        )
    else:
        outcome.status = "survived"
    log(
        f"mutants: {ident:<48s} {outcome.status:<8s} {outcome.seconds:6.0f} s, "
        f"{outcome.programs} programs, feature reached in {outcome.reached}"
    )
    return outcome


def check_seeds(
    mutant: Mutant | None,
    seeds: list[int],
    out: Path,
    log=print,
    one_process: bool = False,
    flags_off_store: Path | None = None,
) -> dict[int, str]:
    """Check seed programs (indices into ``corpus.CORPUS``) directly against
    ``mutant`` (None: the installed overlay), each in its own process so
    that a crash in generated code is that seed's outcome: "ours" kills.
    ``one_process``: all seeds in one process (a crash is then every
    unchecked seed's outcome), for a control that must pass anyway.
    ``flags_off_store``: the flags-off results kept there by the control's
    check (``check.FLAGS_OFF_STORE_ENV``), as ``run_mutants`` keeps them: a
    mutant then compiles only with its flags on."""
    work = out / "seeds" / (mutant.ident if mutant else "control")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = (
        shadow_env(mutant, work / "shadow")
        if mutant
        else {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )
    if flags_off_store is not None:
        env["FUZZ_FLAGS_OFF_STORE"] = str(flags_off_store)  # check.FLAGS_OFF_STORE_ENV
    statuses: dict[int, str] = {}
    for group in [seeds] if one_process else [[seed] for seed in seeds]:
        code = (
            "from tools.fuzz.check import check_case\n"
            "from tools.fuzz.corpus import CORPUS\n"
            f"for seed in {group!r}:\n"
            "    result = check_case(CORPUS[seed])\n"
            "    print('SEED', seed, result.status, result.kind,\n"
            "          result.message[:200], flush=True)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = {
            int(x.split()[1]): x
            for x in proc.stdout.splitlines()
            if x.startswith("SEED ")
        }
        for seed in group:
            line = lines.get(seed, f"SEED {seed} ours worker died ({proc.returncode})")
            statuses[seed] = line.split()[2]
            log(f"mutants: {work.name} {line[5:]}")
    return statuses


def run_mutants(
    *,
    seconds: float = 90,
    seed: int = 0,
    profile: str = "mutants",
    only: str = "",
    survivors: bool = False,
    out: Path | None = None,
    examples: int | None = None,
    jobs: int = 1,
    log=print,
) -> dict:
    """Run the control, then the selected mutants; write and return the report.

    ``examples``: every run checks that many programs (the control's, by
    the shared seed) instead of fuzzing for ``seconds``; ``jobs`` mutants
    run at a time, one worker each.

    ``survivors``: rerun only the mutants that survived (or errored) in the
    report in ``out``, or are new since (those of them in ``only``, if
    given; cost-only and equivalent ones are not rerun), keeping the other
    outcomes of that report.
    """
    out = Path(out or DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)
    previous: dict[str, Outcome] = {}
    if survivors:
        old = json.loads((out / "report.json").read_text())
        current = {m.ident: m for m in MUTANTS}
        previous = {
            m["ident"]: _remarked(Outcome(**m), current.get(m["ident"]))
            for m in old["mutants"]
            if m["ident"] in current  # a mutant since removed is dropped
        }
        wanted = only.split(",") if only else []
        only = ",".join(
            m.ident
            for m in MUTANTS
            if (m.ident not in previous  # new since that report
                or previous[m.ident].status in ("survived", "error"))
            and (not wanted or m.ident in wanted or m.feature in wanted)
            and not (m.cost_only or m.equivalent)  # counted apart
        )  # fmt: skip
        if not only:
            log("mutants: no survivors to rerun")
            return old
    selected = [
        m
        for m in MUTANTS
        if not only or m.feature in only.split(",") or m.ident in only.split(",")
    ]
    budget = f"{examples} programs" if examples else f"{seconds:.0f} s"
    log(
        f"mutants: {len(selected)} mutants, {budget} each, seed {seed}, "
        f"profile {profile}, one worker each, {jobs} at a time; control run first"
    )
    if examples:
        seconds = max(seconds, 24 * 3600.0)  # the programs are the budget
    shutil.rmtree(out / "flags-off", ignore_errors=True)  # this report's control

    def run(mutant):
        return run_one(mutant, out, seconds=seconds, seed=seed, profile=profile,
                       examples=examples, log=log)  # fmt: skip

    control = run(None)
    outcomes = []
    if control.status == "survived":  # the control must pass
        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            outcomes = list(pool.map(run, selected))
    rerun = [o.ident for o in outcomes]
    if previous:
        outcomes = [
            o
            for o in [*previous.values(), *outcomes]
            if o.ident not in rerun or o in outcomes
        ]
        order = [m.ident for m in MUTANTS]
        outcomes.sort(key=lambda o: order.index(o.ident) if o.ident in order else 0)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "rerun": rerun if previous else [],
        "seconds_per_mutant": seconds,
        "examples_per_mutant": examples or 0,
        "jobs": jobs,
        "seed": seed,
        "profile": profile,
        "control": dataclasses.asdict(control),
        "mutants": [dataclasses.asdict(o) for o in outcomes],
        "features": _per_feature(outcomes),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(format_report(report))
    log(format_report(report))
    return report


def _remarked(outcome: Outcome, mutant: Mutant | None) -> Outcome:
    """An earlier outcome with the mutant's current cost-only and
    equivalent marks."""
    if mutant is not None:
        outcome.cost_only, outcome.equivalent = mutant.cost_only, mutant.equivalent
    return outcome


def _per_feature(outcomes: list[Outcome]) -> dict:
    table: dict[str, dict] = {}
    for o in outcomes:
        row = table.setdefault(
            o.feature,
            dict.fromkeys(
                (
                    "mutants",
                    "killed",
                    "survived",
                    "stale",
                    "error",
                    "cost_only",
                    "cost_only_killed",
                    "equivalent",
                    "equivalent_killed",
                ),
                0,
            ),
        )
        row["mutants"] += 1
        if o.cost_only:
            row["cost_only"] += 1
            row["cost_only_killed"] += o.status == "killed"
        elif o.equivalent:
            row["equivalent"] += 1
            row["equivalent_killed"] += o.status == "killed"
        else:
            row[o.status] += 1
    return dict(sorted(table.items()))


def kill_rate(
    report: dict, *, include_cost_only: bool = False, include_equivalent: bool = False
) -> float:
    """Killed share of the mutants that can change results; optionally with
    the cost-only and the equivalent ones in the denominator too."""
    extra = [k for k, on in (("cost_only", include_cost_only),
                             ("equivalent", include_equivalent)) if on]  # fmt: skip
    rows = [{"equivalent": 0, "equivalent_killed": 0, **r}
            for r in report["features"].values()]  # fmt: skip
    killed = sum(r["killed"] + sum(r[f"{k}_killed"] for k in extra) for r in rows)
    total = sum(r["killed"] + r["survived"] + sum(r[k] for k in extra) for r in rows)
    return killed / total if total else 0.0


def format_report(report: dict) -> str:
    control = report["control"]
    control_detail = f"; {control['detail']}" if control["detail"] else ""
    lines = [
        f"# Overlay mutants ({report['date']})",
        "",
        f"Fuzzer: profile `{report['profile']}`, one worker, seed {report['seed']}, "
        + (
            f"the control's {report['examples_per_mutant']} programs per mutant "
            f"({report.get('jobs', 1)} mutants at a time)"
            if report.get("examples_per_mutant")
            else f"{report['seconds_per_mutant']:.0f} s per mutant"
        )
        + ", stopped at the first failure.",
        f"Control run (no mutant): **{control['status']}** "
        f"({control['programs']} programs{control_detail}).",
        "",
    ]
    if control["status"] != "survived":
        lines.append("The control run did not pass: no mutant was run.")
        return "\n".join(lines) + "\n"
    if report.get("rerun"):
        lines += [
            f"Rerun of the {len(report['rerun'])} survivors of an earlier report "
            "(with the same budget); the other outcomes are that report's.",
            "",
        ]
    lines += [
        "| feature | mutants | killed | survived | stale | equivalent (killed) "
        "| cost-only (killed) | kill rate |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for feature, r in report["features"].items():
        judged = r["killed"] + r["survived"]
        rate = f"{100 * r['killed'] / judged:.0f}%" if judged else "-"
        lines.append(
            f"| {feature} | {r['mutants']} | {r['killed']} | {r['survived']} | "
            f"{r['stale']} | {r.get('equivalent', 0)} "
            f"({r.get('equivalent_killed', 0)}) | "
            f"{r['cost_only']} ({r['cost_only_killed']}) | {rate} |"
        )
    everything = kill_rate(report, include_cost_only=True, include_equivalent=True)
    lines += [
        "",
        f"Kill rate of the mutants that can change results: "
        f"**{100 * kill_rate(report):.0f}%**; with the equivalent ones: "
        f"{100 * kill_rate(report, include_equivalent=True):.0f}%; with the "
        f"equivalent and cost-only ones: {100 * everything:.0f}%.",
        "",
        "## Survivors, stale, equivalent and cost-only mutants",
        "",
    ]
    for m in report["mutants"]:
        if m["status"] == "killed" and not (m["cost_only"] or m.get("equivalent")):
            continue
        why = m["detail"] or (
            f"cost only: {m['cost_only']}"
            if m["cost_only"]
            else f"equivalent: {m['equivalent']}"
            if m.get("equivalent")
            else ""
        )
        lines.append(
            f"- `{m['ident']}` ({m['kind']}): {m['status']}, {m['programs']} programs, "
            f"feature reached in {m['reached']}. {why}"
        )
    lines += ["", "## Killed", ""]
    for m in report["mutants"]:
        if m["status"] == "killed" and not (m["cost_only"] or m.get("equivalent")):
            lines.append(
                f"- `{m['ident']}` in {m['seconds']:.0f} s: {m['detail'][:160]}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tools.fuzz.mutants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=90, help="budget per mutant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--examples",
        type=int,
        default=None,
        help="programs per run (the control's, replayed) instead of --seconds",
    )
    parser.add_argument("--jobs", type=int, default=1, help="mutants at a time")
    parser.add_argument("--profile", default="mutants")
    parser.add_argument(
        "--only", default="", help="features or mutant ids, comma-separated"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="rerun the survivors of the report in --out, keep the other outcomes",
    )
    parser.add_argument(
        "--list", action="store_true", help="list mutants, mark stale ones"
    )
    parser.add_argument(
        "--seeds",
        default="",
        help="with --only IDENT: check these seed programs (indices into "
        "corpus.CORPUS, comma-separated, or 'all') against the mutant and "
        "without it, instead of fuzzing",
    )
    args = parser.parse_args(argv)
    if args.seeds:
        from .corpus import CORPUS

        seeds = (
            list(range(len(CORPUS)))
            if args.seeds == "all"
            else [int(i) for i in args.seeds.split(",")]
        )
        out = Path(args.out or DEFAULT_OUT)
        chosen = [m for m in MUTANTS if m.ident in args.only.split(",")]
        control = check_seeds(None, seeds, out, one_process=True)
        killed = {
            m.ident: [i for i, s in check_seeds(m, seeds, out).items() if s == "ours"]
            for m in chosen
        }
        for ident, by in killed.items():
            print(f"{ident}: {'killed by seed ' + str(by) if by else 'survived'}")
        return 0 if all(s != "ours" for s in control.values()) else 1
    if args.list:
        stale = 0
        for m in MUTANTS:
            try:
                mutated_source(m)
                state = "ok"
            except StaleMutant as exc:
                state, stale = f"STALE: {exc}", stale + 1
            print(
                f"{m.ident:<48s} {m.kind:<8s} "
                f"{'cost-only ' if m.cost_only else ''}{state}"
            )
        return 1 if stale else 0
    report = run_mutants(
        seconds=args.seconds,
        seed=args.seed,
        profile=args.profile,
        only=args.only,
        survivors=args.survivors,
        out=args.out,
        examples=args.examples,
        jobs=args.jobs,
    )
    return 0 if report["control"]["status"] == "survived" else 1


if __name__ == "__main__":
    sys.exit(main())

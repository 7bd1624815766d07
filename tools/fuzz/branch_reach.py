"""Branch reach of the overlay's decision code, per program (``--coverage``).

Feature reach (``reach.py``) says that a feature changed some program's
kernels; it cannot say which of the feature's branches ever ran.  A mutant
planted on a branch no program takes survives any campaign, so the campaign
measures branches too:

- the branches are those of every overlay module, and those of the lines the
  series adds to upstream files (``overlay_coverage.added_ranges``), taken
  from coverage.py's static analysis of the installed files: a line with more
  than one possible exit is a branch point, and each of its exits a branch;
- each worker runs under ``coverage run --branch`` and switches coverage's
  dynamic context to the digests of the programs it compiles next
  (``switch_context``), so every executed arc is known per program;
- a branch is named by its file, its function and the source text of both
  ends (``Branch.key``), never by line numbers alone, so that an edit
  elsewhere in the file keeps the names, and a baseline stays comparable.

``report`` gives, per feature (the patches that name the module on their
``Origin:`` line, or "hunks of <file>"), every branch with the number of
programs that took it.  ``UNREACHED_REASONS`` lists the branches no program
can reach, with why; ``check_baseline`` fails a campaign in which a branch
that a committed baseline (``baselines/``) saw reached is no longer reached.
"""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import json
import re
from pathlib import Path

BASELINE_DIR = Path(__file__).with_name("baselines")


@dataclasses.dataclass(frozen=True)
class Branch:
    file: str  # torch/... as installed
    function: str  # enclosing function's qualified name, "<module>" outside one
    line: int  # where it is now: for reading the report, not part of the name
    source: str  # the branch point's source line, stripped
    target: str  # the destination's source line, stripped, or "exit"
    occurrence: int = 1  # the n-th branch of the same name in the function
    to: int = 0  # the destination line now (negative: the function's exit)

    @property
    def key(self) -> str:
        name = f"{self.file}::{self.function}: {self.source} -> {self.target}"
        return name if self.occurrence == 1 else f"{name} #{self.occurrence}"


def switch_context(cases) -> None:
    """Count what runs next for these programs (inside a worker under
    ``coverage run``; elsewhere nothing happens)."""
    try:
        import coverage
    except ImportError:
        return
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(",".join(case.digest() for case in cases))


def _functions(reporter) -> list[tuple[str, set[int]]]:
    regions = [
        (r.name, set(r.lines)) for r in reporter.code_regions() if r.kind == "function"
    ]
    return sorted(regions, key=lambda region: len(region[1]))  # innermost first


def _enclosing(functions, line: int) -> str:
    return next((name for name, lines in functions if line in lines), "<module>")


def branches_of(
    path: Path, rel: str, lines: set[int] | None = None, coverage=None
) -> list[Branch]:
    """Every branch of the installed file ``path`` (only those whose branch
    point is in ``lines``, when given), in line order."""
    from coverage.python import PythonFileReporter

    reporter = PythonFileReporter(str(path), coverage=coverage)
    text = path.read_text().splitlines()
    functions = _functions(reporter)
    exits = reporter.exit_counts()
    out: list[Branch] = []
    seen: collections.Counter[tuple] = collections.Counter()
    for src, dst in sorted(reporter.arcs()):
        if src < 0 or exits.get(src, 0) < 2 or (lines is not None and src not in lines):
            continue
        function = _enclosing(functions, src)
        source = text[src - 1].strip()
        target = text[dst - 1].strip() if dst > 0 else "exit"
        seen[(function, source, target)] += 1
        n = seen[(function, source, target)]
        out.append(Branch(rel, function, src, source, target, n, dst))
    return out


def _programs(context: str) -> int:
    # a context is a batch: its programs compile as one graph, so an arc
    # its compile executed counts for each of them
    return len(context.split(",")) if context else 0


def taken_by_programs(data, path: Path, reporter) -> dict[tuple[int, int], int]:
    """(src, dst) -> programs whose compile executed that arc."""
    # Parse first: translating before the parse leaves the arcs that leave a
    # ``with`` block (which Python 3.11 traces at the ``with`` line) as they
    # were traced, so no branch out of a ``with`` ever counted as taken.
    reporter.arcs()
    counts: collections.Counter[tuple[int, int]] = collections.Counter()
    for context in data.measured_contexts():
        if not context:
            continue  # start-up, before the first program
        data.set_query_contexts([f"^{re.escape(context)}$"])
        arcs = data.arcs(str(path.resolve())) or []  # stored resolved
        for arc in reporter.translate_arcs(arcs):
            counts[arc] += _programs(context)
    data.set_query_contexts(None)
    return counts


def _features(state: dict) -> dict[str, str]:
    """torch/... module -> the installed patches whose Origin: line names it."""
    from fusion_overlay.patchset import patches_dir_for, release_of

    release = release_of(state["torch_version"])
    if release is None:
        raise RuntimeError(f"no release in the overlay state: {state['torch_version']}")
    patches = patches_dir_for(release)
    names: dict[str, list[str]] = collections.defaultdict(list)
    for entry in state["patches"]:
        for line in (patches / entry["name"]).read_text().splitlines():
            if line == "---":
                break
            if line.startswith("Origin:"):
                for part in line.split(",")[1:]:
                    names[part.strip().removeprefix("overlay/")].append(
                        entry["name"][:4]
                    )
    return {rel: " ".join(numbers) for rel, numbers in names.items()}


def _load(data_dir: Path):
    import coverage

    data_file = Path(data_dir) / ".coverage"
    if not data_file.is_file():
        raise FileNotFoundError(
            f"{data_dir}: no coverage data (a run of `python -m tools.fuzz run"
            " --coverage`, or a shard of one, writes it)"
        )
    cov = coverage.Coverage(data_file=str(data_file), branch=True)
    cov.load()
    return cov


def report(data_dirs: list[Path]) -> dict:
    """Branches and the programs that took each, over the run directories
    (a campaign's shards) whose coverage data ``overlay_coverage.report``
    has combined."""
    from coverage.python import PythonFileReporter

    from .overlay_coverage import added_ranges, installed_state, site_root

    covs = [_load(d) for d in data_dirs]
    root = site_root()
    state = installed_state(root)
    features = _features(state)
    programs = sum(
        _programs(c) for cov in covs for c in cov.get_data().measured_contexts() if c
    )
    rows = []
    for rel, info in sorted(state["files"].items()):
        path = root / rel
        if info["source"] == "overlay":
            lines, feature = None, features.get(rel, "shared")
        else:
            ranges = added_ranges(root, state, rel)
            lines = {n for a, b in ranges for n in range(a, b + 1)}
            feature = f"hunks of {Path(rel).name}"
        taken: collections.Counter[tuple[int, int]] = collections.Counter()
        for cov in covs:
            reporter = PythonFileReporter(str(path), coverage=cov)
            taken.update(taken_by_programs(cov.get_data(), path, reporter))
        for branch in branches_of(path, rel, lines, covs[0]):
            rows.append(
                {
                    **dataclasses.asdict(branch),
                    "key": branch.key,
                    "feature": feature,
                    "programs": taken.get((branch.line, branch.to), 0),
                }
            )
    return {"programs": programs, "branches": rows}


# --- unreached branches and the baseline ---------------------------------------

# Branches no fuzzed program can take, by key pattern (fnmatch), with why.
# A pattern that matches no unreached branch is reported as stale.  What a
# program could reach but none does yet has no entry: it stays listed as
# "no reason" until the generator draws it.
_CODEGEN = "torch/_inductor/codegen/cpp_fusion"
_OTHER_DEVICE = (
    "a node on another device: the fuzzer compiles CPU graphs only "
    "(upstream's GPU tests of test_loop_ordering.py take it)"
)
_INVARIANT = "an invariant check: raises only on a bug in the overlay"
_CPU_LOF_CHECKED = (
    "loop ordering after fusion off on a CPU node: its one caller runs "
    "only after _cpu_reindexing and the loop_ordering_after_fusion check, "
    "which together are _cpu_lof"
)
_ONE_PROXY = (
    "stock's failed attempt with fewer kernels than members: it builds one "
    "per member before it can fail, and FailedMerge passes them all"
)
_SHORT_MEMBER = (
    "a member with fewer loops than its node's fusion depth (for 0018, than a "
    "shallower depth): a fusion's depth is at most the loops of the members "
    "it compares, and nothing after shortens a member below it: "
    "merge_loops_to_fuse leaves outer-loop fusions alone, 0005's reindexing "
    "is applied inside can_fuse (refused, it rolls back; accepted, the pair "
    "becomes a node at the backend's depth), 0003's split adds loops, "
    "reorders permute them, merge_loops_consistently sets the depth every "
    "merged member shares or restores its snapshot, and 0019's merges keep "
    "the statistics' first depth loops, or leave a leaf that body_accesses "
    "refuses, a score of 0 and a restore"
)
_INTEGER_INDEX = (
    "a coefficient that is not an integer: Inductor's indices are integer "
    "polynomials whose divisions are FloorDiv and ModularIndexing"
)
_LEAVES = (
    "a scored pair with a leaf that is not a SchedulerNode: _can_fuse "
    "turns extern, nop and grouped nodes away before the backend scores"
)
_BODIES_CHECKED = (
    "a leaf without a loop body: its one caller runs after body_accesses "
    "found a body on every leaf of the node"
)
_MEMBERS_CHECKED = (
    "a member that is not a SchedulerNode: both callers return earlier "
    "unless every member is one"
)
_TRACKED = (
    "a score asked outside can_fuse's loop-mutation tracker: on the CPU "
    "every path to it runs inside (the untracked nested-reduction append "
    "is the GPU's)"
)
_CPU_NODE_KINDS = (
    "_can_fuse turns extern, nop, grouped and nested-reduction nodes away "
    "before the backend is asked, and the CPU builds no foreach node (no "
    "FOREACH feature), combo kernel or mix-order reduction (Triton's)"
)
_VENDOR = (
    "the host's CPU vendor, not a program: the fuzzer pins 0014's answer "
    "for rows of a page ($TORCHINDUCTOR_CPP_PREFETCH_SHORT_ROWS=1, "
    "tools/fuzz/check.py) so that its reach is the same on every host; "
    "test_outer_loop_prefetch.py takes the other answer"
)
_ALLOCATOR = (
    "the process's allocator, not a program: the fuzzer pins 0013's answer "
    "for memory allocated on every call ($TORCHINDUCTOR_CPP_FRESH_PAGES=0, "
    "tools/fuzz/check.py) so that its reach is the same under any allocator; "
    "test_streaming_stores.py takes the other answer and the probe's"
)
_SYSFS = (
    "the machine's sysfs cache sizes, not a program: sizes written "
    "without a K/M/G unit, or not a number"
)
_LARGE_BODY = (
    "a merged body whose code overflows the instruction cache: over 2,048 "
    "loop-body ops at 32 KiB, where the generator's programs make fused "
    "nodes of a few dozen; TorchBench's turbulent_kinetic_energy takes it "
    "(make bench-pyhpc), and test_outer_loop_retile.py with a small cache"
)
_MANY_ROUNDS = (
    "reorder rounds that each fuse until the cap: nine rounds after "
    "upstream's, each fusing a pair that only the round before made possible, "
    "where the ci campaign's programs need one at most; "
    "test_cpu_loop_ordering.py takes it with the cap at upstream's one round"
)
UNREACHED_REASONS: dict[str, str] = {
    "*retile.py::OuterLoopRetile.accepts: if self.refetches_code(proxies): "
    "-> return False": _LARGE_BODY,
    "*retile.py::OuterLoopRetile.refetches_code: if refetches_code(sum(ops), "
    "mean): -> log_retile(*": _LARGE_BODY,
    "*loop_ordering.py::more_reorder_rounds: for _ in range(MAX_REORDER_ROUNDS "
    "- 1): -> return nodes": _MANY_ROUNDS,
    f"{_CODEGEN}/costs.py::_sysfs_caches: *": _SYSFS,
    f"{_CODEGEN}/costs.py::last_level_cache_bytes: *": (
        "make test's campaign pins the last-level cache at 32 MiB "
        "(test_fuzz.py), so that its reach is the same on every host: sysfs "
        "is read there for the instruction cache only"
    ),
    f"{_CODEGEN}/costs.py::prefetches_short_rows: *": _VENDOR,
    f"{_CODEGEN}/costs.py::cpu_vendor: *": _VENDOR,
    f"{_CODEGEN}/costs.py::allocator_maps_fresh_pages: *": _ALLOCATOR,
    f"{_CODEGEN}/costs.py::_probe_fresh_pages: *": _ALLOCATOR,
    "*streaming_stores.py::_streamable_buffers: if not _allocated_fresh(names): "
    "-> for name in stored:": _ALLOCATOR,
    "*streaming_stores.py::_allocated_fresh: if any(real.get(n, n) in callers "
    "for n in names): -> return False": (
        "a graph input or constant stored by a kernel that does not read it: "
        "the scheduler gives every mutation a StarDep on the buffer it "
        "mutates, so _streamable_buffers has skipped it as read; "
        "test_streaming_stores.py builds such a kernel group by hand"
    ),
    "*prefetch.py::_Rows.ahead: if row_bytes <= costs.PAGE_BYTES and not "
    "costs.prefetches_short_rows(): -> return 0*": _VENDOR,
    f"{_CODEGEN}/emitters/accumulators.py::_unroll_pragma: *": (
        "the C++ compiler Inductor builds with, not a program: clang and "
        "other compilers take these"
    ),
    "*: if candidate.load not in line: -> raise AssertionError*": _INVARIANT,
    "*: if store.store not in line: -> raise AssertionError*": _INVARIANT,
    "*: if used.get(helper.name, helper) != helper: -> raise ValueError*": _INVARIANT,
    '*: if device is None or device.type != "cpu" or node2.get_device() != '
    "device: -> return *": _OTHER_DEVICE,
    "*::refresh_group_after_reorder: if not node.is_cpu(): -> return": _OTHER_DEVICE,
    '*::_pair_state: if device is None or device.type != "cpu": -> return None': (
        _OTHER_DEVICE
    ),
    "*::get_device_scheduling: if scheduling_ctor is None: -> *": (
        "a device no backend is registered for (meta tensors): the fuzzer "
        "compiles CPU graphs (the decomposition tests of 0021 and 0022 take it)"
    ),
    "torch/_inductor/ir.py::ComputedBuffer.simplify_and_reorder: "
    "if should_merge_loops: -> iter_ranges*": _OTHER_DEVICE,
    "*scheduler.py::SchedulerNode._compute_attrs: if should_normalize: -> "
    "if isinstance(self.node, ir.TemplateBuffer):": _OTHER_DEVICE,
    "*scheduler.py::_cpu_reindexing: if not nodes or not all(*: -> return False": (
        "a pair of nodes on two devices: can_fuse refuses it before either "
        "caller asks, and every fuzzed node is on the CPU"
    ),
    "*scheduler.py::SchedulerNode.apply_new_loop_order: if _cpu_lof(self): -> "
    "self.refresh_dependencies*": _CPU_LOF_CHECKED,
    "*scheduler.py::FusedSchedulerNode.reorder_loops_by_dep_pair: "
    "if _cpu_lof(self): -> return True": _CPU_LOF_CHECKED,
    "torch/_inductor/ir.py::Reduction.create: if split == 1: -> "
    "def _maybe_increase_split*": (
        "a split reduction on the CPU: the C++ backend reduces to a single "
        "element (num_splits returns 1), and the strict split needs "
        "config.numerics, which no fuzzed program sets"
    ),
    "*retile.py::OuterLoopRetile.for_failed_attempt: "
    "if len(proxies) != len(node.get_outer_nodes()): -> return None*": _ONE_PROXY,
    "*shallower.py::shallower_attempts: if len(stock_proxies) != len(members): "
    "-> return*": _ONE_PROXY,
    "*retile.py::_same_outer_loops: if any(lv is None for lv in levels): "
    "-> return False*": _SHORT_MEMBER,
    "*shallower.py::shallower_attempts: "
    "if not attempt.refused_before_codegen(stock_proxies): -> for depth*": (
        _SHORT_MEMBER
    ),
    "*loop_ordering.py::merge_loops_below: if len(iter_vars) < depth: "
    "-> return*": _SHORT_MEMBER,
    "*first_attempt.py::StockTiling.stock_levels: "
    "if not loops or len(loops) < depth: -> return None*": _SHORT_MEMBER,
    "*first_attempt.py::FirstAttempt.stock_fails: "
    "if any(lv is None for lv in levels): -> return False*": _SHORT_MEMBER,
    "*invariant_loads.py::memory_of_buffer: if V.graph.scheduler: -> inplaced*": (
        "a C++ kernel generated outside the scheduler: only the GEMM "
        "templates' autotuning does, under max_autotune, which no fuzzed "
        "program sets"
    ),
    "*reindexed_affine.py::_affine_terms: if not coefficient.is_Integer: "
    "-> return None": _INTEGER_INDEX,
    "*prefetch.py::static_stride: if not coefficient.is_Integer: -> return 0": (
        _INTEGER_INDEX
    ),
    "*prefetch.py::_plan: if not isinstance(outer.steps, (int, sympy.Integer)):*": (
        "a symbolic loop step: LoopLevel.steps is 1 or the ISA's tiling "
        "factor, an int under dynamic shapes too"
    ),
    "*prefetch.py::_plan: if len(passes) < 2 or not outer_nest.loops: "
    "-> return False": (
        "an outer-loop fused kernel of one pass or of no outer loop: every "
        "such node fuses two or more members over one loop or more"
    ),
    "*prefetch.py::_first_slot: for k in proxy.kernels: -> return None": (
        "a last pass whose every kernel has an empty range: only a loop of "
        "size 0, for which Inductor generates no kernel"
    ),
    "*prefetch.py::_first_pass_nodes: if not scheduled: -> return []": (
        "codegen_loops without scheduled nodes: finalize_kernel adds the "
        "node's leaves before it generates the loops"
    ),
    "*prefetch.py::_first_pass_nodes: if not isinstance(fused, "
    "OuterLoopFusedSchedulerNode): -> return []": (
        "an outer-loop fused kernel whose last leaf the scheduler maps to "
        "another node: name_to_fused_node maps it to its outer-loop node"
    ),
    "*accumulators.py::_ops_so_far: if node is None: -> return set()": (
        "a reduction generated outside SchedulerNode.codegen, which sets the "
        "kernel's current node: no C++ reduction is (flex attention's "
        "modification stores only)"
    ),
    "*accumulators.py::_ops_so_far: for snode in group.get_nodes(): -> return ops": (
        "a node missing from the group name_to_fused_node maps it to: the "
        "scheduler keeps that map for every leaf it fuses"
    ),
    "*block_local_buffers.py::_private_intermediate: if not isinstance(buffer, "
    "ir.ComputedBuffer): -> return None": (
        "a template in an outer-loop fusion: can_fuse_vertical_outer_loop "
        "refuses templates (stock asserts the same on this path)"
    ),
    "*block_fusion.py::remembers_refusals.remembered: if key is None: "
    "-> return score*": _LEAVES,
    "*block_fusion.py::_pair_state: if not all(isinstance(sn, SchedulerNode)*": _LEAVES,
    "*block_tiles.py::leaves_of_one_space: if not all(isinstance(sn, "
    "SchedulerNode)*": _LEAVES,
    "*block_fusion.py::reads_by_block: if isinstance(write, MemoryDep): "
    "-> for write*": (
        "a producer's write that is not a MemoryDep: a scored producer is "
        "a computed buffer's node, whose stores are MemoryDeps"
    ),
    "*block_fusion.py::_unmet_deps_allow_block_fusion: if name not in "
    "scheduler.name_to_buf*": (
        "an unmet dependency on no scheduler buffer: prune_deps drops those "
        "on graph inputs and constants, and every other names a node's output"
    ),
    "*block_fusion.py::index_bounds: if not (bounds.lower.is_number*-> return None": (
        "a value range whose bound is not a number: ValueRanges asserts it "
        "(unknown symbols give infinities, which are numbers)"
    ),
    "*block_fusion.py::_fits_in_cache: if outer is None*": _BODIES_CHECKED,
    "*block_fusion.py::_outer_iterations: if body is None*": _BODIES_CHECKED,
    "*block_tiles.py::tiled_block_fusion_score: if not under_rollback_scope*": (
        _TRACKED
    ),
    "*block_prepend.py::_reindexed_score: if not under_rollback_scope*": _TRACKED,
    "*block_prepend.py::_split_and_score: if not under_rollback_scope*": _TRACKED,
    "*loop_ordering.py::_merge_members_together: if not all(isinstance(sn, "
    "SchedulerNode) for sn in snodes): -> return False": _MEMBERS_CHECKED,
    "*loop_ordering.py::_normalize_deps: if isinstance(sn, SchedulerNode): "
    "-> for sn in node.get_nodes():": _MEMBERS_CHECKED,
    "*loop_ordering.py::try_reindex_pointwise_for_reduction: if not all( "
    "-> return False": (
        "a pointwise side with a member that is not a SchedulerNode, or one "
        "with reduction ranges: can_fuse turns extern, nop and grouped nodes "
        "away, and on the CPU scans, sorts and partial accumulations are "
        "not such nodes"
    ),
    "*speculation.py::worth_speculating: if not isinstance(getattr(graph, "
    '"graph", None), torch.fx.Graph): -> return True*': (
        "asked outside a compile: every fuzzed program asks while its graph "
        "is lowered or scheduled (test_speculation.py takes it)"
    ),
    "*loop_ordering.py::_mergeable_members: if not isinstance(node, "
    "(SchedulerNode, FusedSchedulerNode)): -> return None": (
        "a node that is neither a SchedulerNode nor a FusedSchedulerNode (an "
        "outer-loop fused or foreach node is one, and passes): "
        + _CPU_NODE_KINDS
    ),
    "*block_tiles.py::leaves_of_one_space: if type(node) not in (*": (
        "a scored node of another type than SchedulerNode, FusedSchedulerNode "
        "or OuterLoopFusedSchedulerNode: " + _CPU_NODE_KINDS
    ),
    "*block_tiles.py::same_loops_block_depth: if not (node1.get_operation_names"
    "() & node2.ancestors)*": (
        "a pair that is not producer and consumer: every caller tests the same "
        "ancestry first, and the loop rewrites in between never change "
        "ancestors"
    ),
    "*block_tiles.py::same_digit_block: if not _non_overlapping(inner + outer)*": (
        "a write whose digits overlap: a store is injective over its loops "
        "(every layout Inductor writes through, dense, permuted, padded or a "
        "cat's slice, has strides at least the span below them), and the "
        "overlay's loop rewrites re-express the same index"
    ),
    "*block_tiles.py::_non_overlapping: if stride < reach: -> return False": (
        "overlapping digits: its one caller passes a write's digits, which "
        "never overlap (same_digit_block's check above)"
    ),
    "*block_tiles.py::_composed_of: if not coeff.is_Integer*": _INTEGER_INDEX,
    "*split.py::split_for_outer_extent: for i, size in enumerate(sizes): "
    "-> return None": (
        "a consumer smaller than the producer's outer extent: the split is "
        "asked for pairs whose consumer reads the producer's output by its own "
        "index over sizes that start with the write's (Scheduler.can_fuse_"
        "vertical, asked before the backend, or 0009's score, which shares an "
        "outer loop and answers first), so the loop returns before it ends"
    ),
    "*split.py::_leaf_nodes: if not *isinstance(*-> return None": (
        "a consumer that is not a SchedulerNode or a fused node of them: "
        + _CPU_NODE_KINDS
    ),
    "*block_local_buffers.py::_block_sizes: if math.prod(inner_sizes) != block: "
    "-> return None": (
        "a writer that stores one element in several iterations: once "
        "dense_block_size accepts the write, its inner loops present in the "
        "index map onto [0, S) one to one, so the product differs only for an "
        "inner loop of range above 1 absent from the index; the writer is a "
        "pointwise leaf (_private_intermediate refuses reductions), whose store "
        "is injective over its loops (see same_digit_block's reason), and a "
        "zero-size buffer is a NopKernelSchedulerNode, never a member"
    ),
    "*block_tiles.py::_tile_size: if not sizes1 or not sizes2*": (
        "a tile for loops of no size: _tile_possible required static sizes "
        "longer than the depth, and merging loops keeps one at least"
    ),
}


def _reason_pattern(key: str) -> str | None:
    """The first pattern of UNREACHED_REASONS that names this branch."""
    return next((p for p in UNREACHED_REASONS if fnmatch.fnmatch(key, p)), None)


def reason_for(key: str) -> str | None:
    pattern = _reason_pattern(key)
    return UNREACHED_REASONS[pattern] if pattern else None


def baseline_path() -> Path:
    """This machine's baseline: the make-test campaign reaches branches by
    the torch release, the architecture and vector width it compiles for,
    and the thread count."""
    import platform

    import torch
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    from fusion_overlay.patchset import release_of

    isa = pick_vec_isa()
    bits = isa.bit_width() if isa else 0
    name = f"{release_of(torch.__version__)}-{platform.machine()}-{bits}bit"
    return BASELINE_DIR / f"{name}-{torch.get_num_threads()}t.json"


def check_baseline(data: dict, path: Path) -> list[str]:
    """The branches the baseline saw reached that this run did not reach
    (none when there is no baseline for this machine)."""
    if not path.is_file():
        return []
    reached = {row["key"] for row in data["branches"] if row["programs"]}
    return sorted(set(json.loads(path.read_text())["reached"]) - reached)


def write_baseline(data: dict, path: Path, about: str) -> None:
    """Record the reached branches; refused (nothing written) for a report
    of no program, whose baseline would check nothing."""
    reached = sorted(row["key"] for row in data["branches"] if row["programs"])
    if not data["programs"] or not reached:
        raise ValueError(f"no program reached a branch: {path} left as it is")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"about": about, "reached": reached}, indent=1) + "\n")


def format_reasons(data: dict) -> str:
    """The unreached branches that have a reason, by reason; the reasons
    that match no unreached branch (stale)."""
    by_reason: dict[str, list[dict]] = collections.defaultdict(list)
    used = set()
    for row in data["branches"]:
        pattern = None if row["programs"] else _reason_pattern(row["key"])
        if pattern:
            by_reason[UNREACHED_REASONS[pattern]].append(row)
            used.add(pattern)
    lines = ["  unreached, with the reason no program reaches them:"]
    for why, rows in by_reason.items():
        lines.append(f"    {why}")
        lines += [
            f"      {r['file']}:{r['line']} {r['key'].split('::', 1)[1]}" for r in rows
        ]
    stale = [p for p in UNREACHED_REASONS if p not in used]
    lines += [f"  stale reason (no unreached branch matches): {p}" for p in stale]
    return "\n".join(lines)


def format_report(data: dict, limit: int | None = None) -> str:
    by_feature: dict[str, list[dict]] = collections.defaultdict(list)
    for row in data["branches"]:
        by_feature[row["feature"]].append(row)
    lines = [
        f"  branch reach of the overlay's decision code ({data['programs']} programs)",
        "    feature                      branches  reached  unreached (no reason)",
    ]
    total = reached = bare_all = 0
    for feature, rows in sorted(by_feature.items()):
        hit = sum(1 for r in rows if r["programs"])
        bare = sum(1 for r in rows if not r["programs"] and not reason_for(r["key"]))
        total, reached, bare_all = total + len(rows), reached + hit, bare_all + bare
        lines.append(
            f"    {feature:<28s} {len(rows):8d} {hit:8d}  {len(rows) - hit:6d} ({bare})"
        )
    lines.append(
        f"    {'all':<28s} {total:8d} {reached:8d}  {total - reached:6d} ({bare_all})"
    )
    missing = [
        r for r in data["branches"] if not r["programs"] and not reason_for(r["key"])
    ]
    if missing:
        lines.append("  unreached, no reason listed:")
        for row in missing[:limit]:
            lines.append(
                f"    {row['file']}:{row['line']} {row['key'].split('::', 1)[1]}"
            )
        if limit is not None and len(missing) > limit:
            lines.append(f"    ... and {len(missing) - limit} more")
    return "\n".join(lines)

"""The fusion fuzzer (tools/fuzz): its parts, the `ci` profile, a mutant it must catch.

The `ci` run compiles the seed programs and 15 generated programs twice each
(overlay flags off and on) in two worker processes, and must reach every
overlay feature; the mutant test runs the fuzzer against a temporary copy of
the installed cpp_fusion/outer_loop/split.py with an off-by-one (one of
tools/fuzz/mutants.py's), imported in place of the real module by a
sitecustomize on PYTHONPATH.  The real tree and .venv are never modified.
"""

from __future__ import annotations

import concurrent.futures

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from compile_utils import requires_vectors, vector_lanes
from conftest import REPO_ROOT, once_per_run
from hypothesis import HealthCheck, given, settings

from torch._inductor.codegen.cpp_fusion.costs import CACHE_BYTES_ENV

from tools.fuzz import branch_reach, check, mutants, reach, strategy
from tools.fuzz.check import CheckResult, check_case, compare
from tools.fuzz.corpus import CORPUS
from tools.fuzz.overlay_coverage import site_root
from tools.fuzz.program import FuzzCase, InputSpec, OpSpec
from tools.fuzz.repro import known_crashes, signature, write_repro
from tools.fuzz.runner import (
    _crashed_workers,
    case_to_json,
    format_summary,
    merge_runs,
    poisoned_env,
    run_fuzz,
)
from tools.fuzz.strategy import fuzz_cases

# Off by one in the exact split: the consumer loops over one slice too few per
# outer iteration, so part of its output is never written (reads stay in bounds).
SPLIT_MUTANT = next(m for m in mutants.MUTANTS if m.ident == "0003-remainder-minus-one")

RELU_SOURCE = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def program(x0):\n    v1 = torch.relu(x0)\n    return (v1,)\n"
)


# --- parts (no compiling) ---------------------------------------------------


@pytest.mark.parametrize(
    "layout, contiguous",
    [("contiguous", True), ("channels_last", False), ("transposed", False),
     ("strided", False), ("offset", False), ("expanded", False),
     ("storage_offset", True), ("as_strided", False)],
)  # fmt: skip
def test_input_layouts(layout, contiguous):
    spec = InputSpec((3, 4, 5, 6), layout=layout)
    a = spec.make(torch.Generator().manual_seed(1))
    b = spec.make(torch.Generator().manual_seed(1))
    meta = spec.make(None, device="meta")
    assert a.shape == meta.shape == (3, 4, 5, 6)
    assert a.stride() == meta.stride()
    assert a.storage_offset() == meta.storage_offset()
    assert a.is_contiguous() is contiguous
    assert torch.equal(a, b)  # inputs come from the seed
    if layout in ("storage_offset", "as_strided"):  # odd: no vector boundary
        assert a.storage_offset() % 2 == 1


@pytest.mark.parametrize("op", strategy.REDUCTIONS)
def test_every_reduction_kind_renders_and_runs(op):
    x = torch.randn(3, 40, 17)
    params = {"op": op, "dims": (1,), "keepdim": True}
    if op in ("var_mean", "var", "std"):
        params["correction"] = 1
    outs = ("v1", "v2") if op in ("var_mean", "max", "min") else ("v1",)
    line = OpSpec("reduce", ("x0",), tuple(params.items()), outs).render()
    namespace = {"torch": torch, "x0": x}
    exec(line, namespace)  # noqa: S102 - our own rendered op
    assert namespace["v1"].shape == (3, 1, 17)
    if op in ("argmax", "argmin", "max", "min"):  # the indices come last
        want = getattr(torch, "arg" + op.removeprefix("arg"))(x, 1, keepdim=True)
        assert torch.equal(namespace[outs[-1]], want)


def _drawn(family: str, n: int = 150) -> list:
    programs = []

    @settings(max_examples=n, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy.targeted_programs(family=family))
    def collect(program):
        programs.append(program)

    collect()
    return programs


def test_the_reductions_family_draws_every_kind_over_every_dim():
    ops = [op for p in _drawn("reductions") for op in p.ops if op.kind == "reduce"]
    assert {op.param("op") for op in ops} == set(strategy.REDUCTIONS)
    assert {op.param("dims") for op in ops} >= {(0,), (1,), (2,)}
    inputs = [s for p in _drawn("reductions") for s in p.inputs]
    assert any(s.layout == "storage_offset" for s in inputs)


def test_the_offsets_family_writes_pieces_at_offsets_inside_larger_buffers():
    programs = _drawn("offsets")
    kinds = {(op.kind, op.param("op")) for p in programs for op in p.ops}
    assert {("cat", None), ("cat", "stack"), ("into_slice", None)} <= kinds
    flat = [p for p in programs if any(op.param("method") == "reshape" for op in p.ops)]
    assert flat  # the half-vector offset of flattened whole-vector rows
    layouts = {s.layout for p in programs for s in p.inputs}
    assert {"storage_offset", "as_strided"} <= layouts
    for p in programs[:20]:  # each runs eagerly
        case = FuzzCase.from_program(p)
        outs = case.build()(*case.make_inputs())
        assert all(isinstance(t, torch.Tensor) for t in outs)


@settings(max_examples=120, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(fuzz_cases())
def test_generated_programs_run_eagerly(case):
    out = case.build()(*case.make_inputs())
    assert isinstance(out, tuple) and all(isinstance(t, torch.Tensor) for t in out)
    assert case.source.startswith("import torch\n")
    assert case.digest() == FuzzCase(**case.__dict__).digest()


def test_compare_is_relative_to_magnitude():
    want = (torch.tensor([1000.0, 1.0]),)
    assert compare((torch.tensor([1000.05, 1.0]),), want, 1e-4).ok  # 0.05 < 1e-4 * 1000
    assert not compare((torch.tensor([1000.0, 1.2]),), want, 1e-4).ok
    assert not compare((torch.tensor([1000.0, float("nan")]),), want, 1e-4).ok
    assert not compare((torch.zeros(3),), (torch.zeros(2),), 1e-4).ok


@pytest.mark.parametrize(
    "off_delta, on_delta, status",
    [(0.0, 0.0, "ok"), (0.0, 0.5, "ours"), (0.5, 0.5, "stock"), (0.5, 0.0, "stock"),
     (0.0, "raise", "ours"), ("raise", "raise", "stock"), (0.0, 1e-4, "ours"),
     (4e-5, -4e-5, "noise")],
)  # fmt: skip
def test_classification(monkeypatch, off_delta, on_delta, status):
    """Flags on is blamed only where flags off agrees with eager, and only when
    it is less accurate than flags off (float64 reference), not just different."""

    def fake_compile_and_run(fn, args, *, overlay, dynamic, extra_config, **_):
        delta = on_delta if overlay else off_delta
        if delta == "raise":
            raise RuntimeError("C++ compile error")
        outputs = tuple(t + delta for t in fn(*args))
        return outputs, _FakeCompiled()

    monkeypatch.setattr(check.compile_utils, "compile_and_run", fake_compile_and_run)
    result = check_case(FuzzCase(RELU_SOURCE, (InputSpec((4, 5)),)))
    assert result.status == status, result


def test_another_dtype_is_ours_however_accurate(monkeypatch):
    """Flags on returning float32 where flags off returns bfloat16 is closer to
    the float64 reference, and still wrong."""

    def fake_compile_and_run(fn, args, *, overlay, dynamic, extra_config, **_):
        outputs = fn(*(a.float() for a in args)) if overlay else fn(*args)
        return outputs, _FakeCompiled()

    monkeypatch.setattr(check.compile_utils, "compile_and_run", fake_compile_and_run)
    result = check_case(FuzzCase(RELU_SOURCE, (InputSpec((4, 5), "bfloat16"),)))
    assert result.status == "ours", result
    assert "float32[4, 5], expected bfloat16[4, 5]" in result.message


SUM_SOURCE = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def program(x0, w1):\n    v2 = x0.sum(1) * w1\n    return (v2, x0)\n"
)


def _two_programs() -> list[FuzzCase]:
    return [
        FuzzCase(RELU_SOURCE, (InputSpec((4, 5)),), input_seed=1),
        FuzzCase(SUM_SOURCE, (InputSpec((3, 7)), InputSpec((3,), role="weight")), 2),
    ]


def test_a_batch_returns_every_programs_outputs_in_order():
    cases = _two_programs()
    batch = check.batch_case(cases)
    got = batch.build()(*[t for c in cases for t in c.make_inputs()])
    want = [t for c in cases for t in c.build()(*c.make_inputs())]
    assert len(got) == len(want) == 3
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert batch.inputs == cases[0].inputs + cases[1].inputs


def test_a_case_alone_gets_a_batch_of_its_own():
    from tools.fuzz.runner import batches

    one, two = _two_programs()
    assert batches([one, two], 4) == [(one, two)]
    lone_one, lone_two = (dataclasses.replace(c, alone=True) for c in (one, two))
    grouped = batches([one, lone_one, two, lone_two], 4)
    assert sorted(grouped, key=len) == [(lone_one,), (lone_two,), (one, two)]


def _perturbing_compile(monkeypatch, broken):
    """compile_and_run that adds 0.5 to the flags-on outputs ``broken`` picks."""
    calls = []

    def fake_compile_and_run(fn, args, *, overlay, dynamic, extra_config, **_):
        calls.append(len(args))
        outputs = fn(*args)
        return tuple(
            t + 0.5 if overlay and broken(t, len(args)) else t for t in outputs
        ), _FakeCompiled()

    monkeypatch.setattr(check.compile_utils, "compile_and_run", fake_compile_and_run)
    return calls


def test_a_batch_compiles_once_per_flag_setting(monkeypatch):
    calls = _perturbing_compile(monkeypatch, lambda t, n: False)
    results = check.check_batch(_two_programs())
    assert [r.status for r in results] == ["ok", "ok"]
    assert calls == [3, 3]  # one graph of both programs' inputs, off then on
    assert results[0].stats["batch"] == 2 and results[1].stats["batched"]


LAYER_NORM_SOURCE = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def program(x0):\n    v1 = F.layer_norm(x0, (x0.shape[-1],))\n    return (v1,)\n"
)


def _count_builds(monkeypatch) -> list[int]:
    """Inductor's builds of C++ kernels with Python bindings (a g++ call, or
    a module taken from the kept cache), below tools/fuzz/same_kernels.py's
    wrapper of ``load_pybinding_async``."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache as Loader

    builds: list[int] = []
    load_async = Loader.load_async.__func__  # type: ignore[attr-defined]

    def spy(cls, *args, **kwargs):
        builds.append(1)
        return load_async(cls, *args, **kwargs)

    monkeypatch.setattr(Loader, "load_async", classmethod(spy))
    return builds


def test_flags_on_takes_the_flags_off_build_of_the_same_kernel(monkeypatch):
    # relu: the overlay changes nothing, the flags-on compile builds nothing
    builds = _count_builds(monkeypatch)
    result = check_case(FuzzCase(RELU_SOURCE, (InputSpec((4, 5)),)))
    assert result.status == "ok"
    assert not result.stats["code_differs"]
    assert result.stats["kernels_reused"] == 1
    assert len(builds) == 1  # the flags-off build only


def test_a_kernel_the_overlay_changed_is_built_again(monkeypatch):
    # LayerNorm: 4 loop nests with the flags off, 1 re-tiled one with them on
    builds = _count_builds(monkeypatch)
    case = FuzzCase(LAYER_NORM_SOURCE, (InputSpec((16, 1024)),), threads=2)
    result = check_case(case)
    assert result.status == "ok"
    assert result.stats["code_differs"]
    assert (result.stats["nests_off"], result.stats["nests_on"]) == (4, 1)
    assert result.stats["kernels_reused"] == 0
    assert len(builds) == 2


def test_a_batch_failure_is_reported_on_the_program_alone(monkeypatch):
    """Only the relu program's output is wrong: it fails alone too, and the
    verdict is the one of the program alone; its neighbour stays ok."""
    calls = _perturbing_compile(monkeypatch, lambda t, n: t.shape == (4, 5))
    relu, summed = check.check_batch(_two_programs())
    assert (relu.status, summed.status) == ("ours", "ok")
    assert relu.repro is None and "batch" not in relu.stats
    assert calls == [3, 3, 1, 1]  # the batch, then the relu program alone


def test_a_failure_only_in_the_batch_is_reported_on_the_batch(monkeypatch):
    calls = _perturbing_compile(monkeypatch, lambda t, n: n == 3 and t.shape == (3,))
    relu, summed = check.check_batch(_two_programs())
    assert (relu.status, summed.status) == ("ok", "ours")
    assert summed.kind.endswith("(in a batch only)")
    assert summed.repro is not None and len(summed.repro.inputs) == 3
    assert summed.stats["repro_batch"]  # the batch as one program fails again
    assert calls == [3, 3, 2, 2, 3, 3]


def test_a_crashing_batch_is_checked_program_by_program(monkeypatch):
    def fake_compile_and_run(fn, args, *, overlay, dynamic, extra_config, **_):
        if overlay and len(args) == 3:
            raise RuntimeError("C++ compile error")
        return fn(*args), _FakeCompiled()

    monkeypatch.setattr(check.compile_utils, "compile_and_run", fake_compile_and_run)
    assert [r.status for r in check.check_batch(_two_programs())] == ["ok", "ok"]


def test_the_flags_off_store_compiles_each_program_once(monkeypatch, tmp_path):
    """With FUZZ_FLAGS_OFF_STORE (the mutant runner's), a program checked
    again loads its flags-off result; a member's other input values are
    another program."""
    monkeypatch.setenv(check.FLAGS_OFF_STORE_ENV, str(tmp_path))
    calls = []

    def fake_compile_and_run(fn, args, *, overlay, dynamic, extra_config, **_):
        calls.append("on" if overlay else "off")
        return tuple(fn(*args)), _FakeCompiled()

    monkeypatch.setattr(check.compile_utils, "compile_and_run", fake_compile_and_run)
    cases = _two_programs()
    for _ in range(2):
        assert check_case(cases[0]).status == "ok"
        assert [r.status for r in check.check_batch(cases)] == ["ok", "ok"]
    assert calls == ["off", "on", "off", "on", "on", "on"]
    reseeded = [cases[0], dataclasses.replace(cases[1], input_seed=3)]
    check.check_batch(reseeded)
    assert calls[-2:] == ["off", "on"]


def test_seed_programs_are_batched_by_how_they_compile():
    from tools.fuzz.runner import batches

    a, b = _two_programs()
    c = dataclasses.replace(a, threads=2)
    assert batches([a, c, b, a], 2) == [(a, b), (a,), (c,)]


class _FakeCompiled:
    nests, total_nests, outer_fused, retiled, reordered, kernels = [1], 1, 0, 0, 0, []
    code = ""


def test_repro_file_rebuilds_the_case(tmp_path):
    case = FuzzCase(
        RELU_SOURCE, (InputSpec((2, 3), "bfloat16", "transposed"),), 7, True, "seed"
    )
    path = write_repro(
        case, "flags on disagrees with flags off", "detail one; detail two", tmp_path
    )
    assert path.name == f"test_fuzz_{case.digest()}.py"
    spec = importlib.util.spec_from_file_location("fuzz_repro", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.CASE == case
    assert hasattr(module, f"test_fuzz_{case.digest()}")


def test_known_crashes_are_xfail_repros_of_crashes(tmp_path):
    case = FuzzCase(RELU_SOURCE, (InputSpec((2, 3)),))
    other = FuzzCase(RELU_SOURCE, (InputSpec((3, 3)),))
    crash = "InductorError: AssertionError: buf11"
    write_repro(case, "crash with flags on", crash, tmp_path, xfail="known bug")
    write_repro(other, "crash with flags on", "RuntimeError: 3 != 4", tmp_path)
    # buffer numbers differ from program to program
    assert signature("crash with flags on", "InductorError: AssertionError: buf5") in (
        known_crashes(tmp_path)
    )
    assert len(known_crashes(tmp_path)) == 1  # the repro without xfail is not known


def test_a_dead_worker_leaves_a_repro_of_its_last_program(tmp_path):
    """A segfault in generated code kills the worker; its last program is kept."""
    case = FuzzCase(RELU_SOURCE, (InputSpec((2, 3)),))
    records = [
        {"type": "example", "worker": 0},
        {"type": "start", "worker": 0, "case": case_to_json(case)},
    ]
    dead = subprocess.CompletedProcess([], returncode=-11)
    crashed = _crashed_workers([dead], [0], records, tmp_path, tmp_path / "repros")
    assert len(crashed) == 1 and "signal 11" in crashed[0]
    assert (tmp_path / "repros" / f"test_fuzz_{case.digest()}.py").exists()


FAKE_WORKER = """
import json, sys, time
path, index = sys.argv[1], int(sys.argv[2])
with open(path, "a") as f:
    f.write(json.dumps({"type": "example", "t": 0, "status": "ok", "kind": "",
        "message": "", "stats": {}, "kinds": [], "config": "seed",
        "dynamic": False, "low_precision": False, "variant": [],
        "shrinking": False, "digest": f"d{index}"}) + "\\n")
time.sleep(120)
"""


def _interrupted_run(tmp_path, monkeypatch, shard, sigterm=False):
    """A run whose workers each record one program, then is stopped: Ctrl-C,
    or the SIGTERM a cancelled CI job or a preempted machine sends."""
    from tools.fuzz import runner

    def fake_command(opts, include):
        path = opts.out_dir / f"worker{opts.index}.jsonl"
        return [sys.executable, "-c", FAKE_WORKER, str(path), str(opts.index)]

    read = runner._read_records
    stopped = []

    def read_then_stop(out_dir, indices):
        records = read(out_dir, indices)
        examples = [r for r in records if r["type"] == "example"]
        if len(examples) == len(indices) and not stopped:
            stopped.append(True)
            if sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
            raise KeyboardInterrupt  # once, as the first Ctrl-C
        return records

    monkeypatch.setattr(runner, "_worker_command", fake_command)
    monkeypatch.setattr(runner, "_read_records", read_then_stop)
    summary = runner.run_fuzz(
        "ci", seconds=60, seed=3, workers=2, out_dir=tmp_path / f"shard{shard[0]}",
        repro_dir=tmp_path / "repros", shard=shard, cache_dir=tmp_path / "cache",
        progress_every=1e9, log=lambda *a: None,
    )  # fmt: skip
    assert stopped
    return summary


@pytest.mark.parametrize("sigterm", [False, True], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_writes_its_summary(tmp_path, monkeypatch, sigterm):
    summary = _interrupted_run(tmp_path, monkeypatch, (1, 1), sigterm)
    assert summary.interrupted and len(summary.examples) == 2
    assert not summary.crashed_workers  # stopped by us: no crash, no repro
    meta = json.loads((tmp_path / "shard1" / "summary.json").read_text())
    assert meta["interrupted"] and meta["stats"]["tried"] == 2
    assert not (tmp_path / "repros").exists()


def test_merge_counts_an_interrupted_shard_and_says_so(tmp_path, monkeypatch):
    from tools.fuzz.runner import merge_runs

    for index in (1, 2):
        _interrupted_run(tmp_path, monkeypatch, (index, 2))
    summary, problems = merge_runs([tmp_path / "shard1", tmp_path / "shard2"])
    assert len(summary.examples) == 4 and summary.interrupted
    assert problems == ["interrupted before their budget ran out: shard(s) 1/2, 2/2"]


# --- the ci profile ---------------------------------------------------------


def test_fuzz_ci_profile(tmp_path, monkeypatch):
    """`make test`'s share of fuzzing, as a campaign of 2 shards run side by
    side and merged: no overlay failure; every overlay feature changed the
    kernels of at least one program; every branch of the overlay's decision
    code that this machine's baseline saw reached is reached again; the
    shards' seeds and seed programs do not overlap; the Inductor cache they
    share is kept, pruned to its budget."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    # the cost model's cache size from the campaign, not from the machine:
    # the same programs then take the same branches on every machine of an
    # ISA (a program's own cache size still overrides it)
    monkeypatch.setenv(CACHE_BYTES_ENV, str(32 << 20))
    cache, budget = tmp_path / "cache", 4 << 20
    lines: list[str] = []

    def shard(i: int):
        return run_fuzz("ci", seed=0, workers=1, shard=(i, 2), cache_dir=cache,
                        cache_budget=budget, out_dir=tmp_path / f"run{i}",
                        coverage=True, log=lines.append)  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        shards = list(pool.map(shard, (1, 2)))
    kept = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    assert 0 < kept <= budget
    assert [s.seeds for s in shards] == [[0], [1]]
    # each shard ran its own half of the seed programs first (then generated
    # ones, which may happen to equal a seed program)
    from tools.fuzz.corpus import corpus_for

    for i, run in enumerate(shards):
        half = {case.digest() for case in corpus_for(i, 2)}
        assert {r["digest"] for r in run.examples[: len(half)]} == half

    summary, problems = merge_runs([tmp_path / "run1", tmp_path / "run2"])
    assert not problems
    assert len(summary.examples) == sum(len(s.examples) for s in shards)
    report = "\n".join(lines) + format_summary(summary)
    print(report)
    assert "programs per second per worker" in report
    assert summary.ok, report
    _, partial = merge_runs([tmp_path / "run1"])
    assert partial == ["missing shard(s) 2/2"]
    stats = summary.stats()
    assert stats["checked"] >= 20, report
    assert stats["programs_with"].get("code_differs", 0) > 0, report
    assert set(stats["reach"]) == set(reach.FEATURES), report
    if vector_lanes():
        # without a vector ISA most features have nothing to act on (no
        # vector tiling to re-tile, no vector stores to stream or loads to
        # prefetch): the campaign then checks values, not reach
        unreached = [f for f, n in stats["reach"].items() if not n]
        assert not unreached, f"features not reached: {unreached}\n{report}"
    assert summary.branches and summary.branches["programs"] == stats["tried"]
    lost = branch_reach.check_baseline(summary.branches, branch_reach.baseline_path())
    assert not lost, "branches the baseline saw reached, not reached:\n" + "\n".join(
        lost
    )


# --- reach counts -------------------------------------------------------------


def test_reach_counts_the_decisions_of_the_flags_on_run():
    """GroupNorm(2, 4) with weight and bias (a seed program): the split
    (0003) changes its kernels once with the flags on; with them off no
    feature decides anything."""
    (gn,) = [
        case
        for case in CORPUS
        if "F.group_norm(x0, 2, w1, w2" in case.source
        and case.inputs[0].shape == (4, 4, 4)
    ]
    fn, args = gn.build(), gn.make_inputs()
    off = check._compile(gn, fn, args, overlay=False)
    on = check._compile(gn, fn, args, overlay=True)
    assert not any(off[3].values()), off[3]
    assert on[3]["0003"] == 1, on[3]


def test_reach_wraps_every_feature_decision():
    assert reach.install() == []
    # 0016 changes kernel counters only (0001 adds the first flags): no
    # decision about the code; every other patch of the release's series has one
    from fusion_overlay.patchset import load_series

    numbers = load_series().numbers()
    assert reach.FEATURES == tuple(n for n in numbers if n not in ("0001", "0016"))


def test_summary_reports_reach_per_feature():
    from tools.fuzz.runner import aggregate

    examples = [
        {
            "status": "ok",
            "stats": {"reach": {"0009": 2, "0011": 1}},
            "config": "default",
        },
        {"status": "ok", "stats": {"reach": {"0009": 1}}, "config": "default"},
        {"status": "invalid", "stats": {"reach": {"0013": 1}}, "config": "default"},
    ]
    counts = aggregate(examples)["reach"]
    assert counts["0009"] == 2 and counts["0011"] == 1
    assert counts["0013"] == 0  # invalid programs are not checked


# --- mutants ------------------------------------------------------------------


def test_every_mutant_applies_to_the_installed_overlay():
    """A mutant whose text moved is stale: update it with the module."""
    stale = []
    for mutant in mutants.MUTANTS:
        try:
            assert (
                mutants.mutated_source(mutant)
                != (site_root() / mutant.path).read_text()
            )
        except mutants.StaleMutant as exc:
            stale.append(str(exc))
    assert not stale, "\n".join(stale)
    features = {m.feature for m in mutants.MUTANTS}
    assert features == set(reach.FEATURES) - set(mutants.WITHOUT_MUTANTS)
    for feature in features:  # at least three per feature
        assert sum(m.feature == feature for m in mutants.MUTANTS) >= 3, feature


def test_a_mutant_whose_text_moved_is_reported_stale(tmp_path):
    path = tmp_path / "torch" / "mod.py"
    path.parent.mkdir()
    path.write_text("x = 1\nx = 1\n")
    twice = mutants.Mutant("0002", "twice", "torch/mod.py", "x = 1", "x = 2", "bound")
    gone = mutants.Mutant("0002", "gone", "torch/mod.py", "y = 1", "y = 2", "bound")
    missing = mutants.Mutant("0002", "missing", "torch/no.py", "x", "y", "bound")
    for mutant, text in (
        (twice, "2 times"),
        (gone, "0 times"),
        (missing, "not installed"),
    ):
        with pytest.raises(mutants.StaleMutant, match=text):
            mutants.mutated_source(mutant, root=tmp_path)
    # a stale mutant is reported, never run
    outcome = mutants.run_one(gone, tmp_path / "out", seconds=1, seed=0,
                              profile="mutants",
                              log=lambda line: None)  # fmt: skip
    assert outcome.status == "stale"


def test_shadow_env_imports_the_mutant(tmp_path):
    mutant = next(m for m in mutants.MUTANTS if m.feature == "0004")
    env = mutants.shadow_env(mutant, tmp_path / "shadow")
    probe = _run(
        [sys.executable, "-c", f"import {mutant.module} as m; print(m.__file__)"],
        env, timeout=300,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == str(tmp_path / "shadow" / "mutant_costs.py")


def test_mutant_report_rates_per_feature():
    outcomes = [
        mutants.Outcome("0009-a", "0009", "bound", "killed"),
        mutants.Outcome("0009-b", "0009", "check", "survived"),
        mutants.Outcome("0007-a", "0007", "check", "survived", cost_only="heuristic"),
        mutants.Outcome("0009-c", "0009", "check", "stale"),
        mutants.Outcome("0009-d", "0009", "check", "survived", equivalent="dead code"),
    ]
    report = {"date": "d", "seconds_per_mutant": 1, "seed": 0, "profile": "mutants",
              "control": {"status": "survived", "programs": 3, "detail": ""},
              "mutants": [o.__dict__ for o in outcomes],
              "features": mutants._per_feature(outcomes)}  # fmt: skip
    assert report["features"]["0009"]["stale"] == 1
    assert mutants.kill_rate(report) == 0.5  # cost-only, equivalent, stale apart
    assert mutants.kill_rate(report, include_equivalent=True) == 1 / 3
    text = mutants.format_report(report)
    assert "| 0009 | 4 | 1 | 1 | 1 | 1 (0) | 0 (0) | 50% |" in text
    assert "`0009-b` (check): survived" in text and "`0009-c`" in text
    assert "equivalent: dead code" in text


def test_every_mutant_replays_the_controls_programs(tmp_path, monkeypatch):
    """run_mutants(examples=N): the control and every mutant run N programs
    from the same seed, all reading one flags-off store that the report's
    control starts empty."""
    started = []

    class FakeProcess:
        pid, returncode = 0, 0

        def __init__(self, cmd, env, **_):
            started.append((cmd, env))

        def poll(self):
            return 0

    monkeypatch.setattr(mutants.subprocess, "Popen", FakeProcess)
    (tmp_path / "flags-off").mkdir()
    (tmp_path / "flags-off" / "stale.pt").write_text("an earlier control's")
    report = mutants.run_mutants(
        only="0003-remainder-minus-one,0005-prefix-at-least", examples=300,
        jobs=2, seed=5, out=tmp_path, log=lambda *_: None,
    )  # fmt: skip
    assert len(started) == 3  # the control, then the two mutants
    for cmd, env in started:
        assert cmd[cmd.index("--examples") + 1] == "300"
        assert cmd[cmd.index("--seed") + 1] == "5"
        assert env[check.FLAGS_OFF_STORE_ENV] == str(tmp_path / "flags-off")
    assert not (tmp_path / "flags-off" / "stale.pt").exists()
    assert "the control's 300 programs per mutant (2 mutants at a time)" in (
        mutants.format_report(report)
    )


def test_a_double_fault_mutant_applies_every_edit(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("a = 1\nb = 2\n")
    mutant = mutants.Mutant("0000", "x", "m.py", "a = 1", "a = 0", "bound",
                            also=(("b = 2", "b = 0"),))  # fmt: skip
    assert mutants.mutated_source(mutant, tmp_path) == "a = 0\nb = 0\n"
    broken = dataclasses.replace(mutant, also=(("c = 3", "c = 0"),))
    with pytest.raises(mutants.StaleMutant):
        mutants.mutated_source(broken, tmp_path)


# --- a broken overlay must be caught ----------------------------------------


def _mutant_env(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with a sitecustomize that imports a mutated split module."""
    return mutants.shadow_env(SPLIT_MUTANT, tmp_path / "shadow")


def _run(cmd: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# The whole path, CLI to standalone repro, at about a minute: make test-all.
# Catching each feature's mutant is make test's (test_a_feature_seed_kills_its_mutant).
@pytest.mark.slow
def test_fuzzer_catches_a_broken_split(tmp_path):
    env = _mutant_env(tmp_path)
    repros = tmp_path / "repros"
    fuzz = _run(
        [sys.executable, "-m", "tools.fuzz", "run", "--profile", "ci", "--workers", "1",
         "--seed", "0", "--examples", "24", "--out", str(tmp_path / "run"),
         "--repro-dir", str(repros)],
        env, timeout=600,
    )  # fmt: skip
    output = fuzz.stdout + fuzz.stderr
    assert fuzz.returncode == 1, output
    assert "[flags on disagrees with flags off]" in output, output
    files = sorted(repros.glob("test_fuzz_*.py"))
    assert len(files) == 1, output
    assert "F.group_norm(" in files[0].read_text(), files[0].read_text()

    # The shrunk repro is a standalone test: it fails with the mutant, passes without.
    pytest_cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(files[0]),
    ]
    with_mutant = _run(pytest_cmd, env, timeout=300)
    assert with_mutant.returncode == 1, with_mutant.stdout + with_mutant.stderr
    clean_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    without = _run(pytest_cmd, clean_env, timeout=300)
    assert without.returncode == 0, without.stdout + without.stderr


# (mutant, a text of the seed program added to kill it)
FEATURE_SEEDS = [
    # parallel reduction loops, one collapsed over two: 0017's pragma
    # between the collapsed loops fails to compile; the rotation, and so the
    # pragma, needs vector kernels
    pytest.param(
        "0017-collapsed-loop-unrolled", "x0[:, :3000]", marks=requires_vectors
    ),
    # the prefetch needs vector loads
    pytest.param("0014-index-of-another-loop", "x0[:, :, :32]", marks=requires_vectors),
    ("0015-reduction-first-any-pointwise", "x0.flatten() * 2"),
    # a reach seed: the regrouped head's buffer, removed, named as an output
    ("0012-removed-output-kept", "return (torch.softmax(x0, dim=1),)"),
    ("0005-prefix-at-least", "torch.softmax(x0.transpose(0, 1), dim=-1)"),
    ("0015-members-merged-apart", "v3 = v2.flatten() + 1"),
    ("0003-inexact-split", "v3 = v1.reshape(6, 4) * x1"),
    ("0003-members-not-aligned", "v3 = v2[:, 1:] * 2"),
    ("0020-first-member-merged", "F.conv2d(v3, w7)"),
    # the same seed kills 0021's other two mutants (make fuzz-mutants)
    ("0021-max-not-subtracted", "torch.softmax(x0 * 48.0, dim=1)"),
    # and 0022's seed its other two
    ("0022-spread-of-channel-means-dropped", "x0 + w1 * 4.0"),
    # 16 pixels: one block holds them all
    ("0022-few-pixels-one-short", "F.group_norm(x0, 32, eps=1e-5)"),
    # one seed for 0023's list: argmax and argmin over rows of 256 KiB
    # (make fuzz-mutants runs the argmin mutant on it too)
    ("0023-argmax-splits", "torch.argmax(x0, dim=1"),
    # a stream store 32 bytes past a 64-byte boundary faults on AVX-512 only
    pytest.param(
        "0013-half-aligned-avx512",
        "torch.cat([v1.reshape((-1,))",
        marks=pytest.mark.skipif(vector_lanes() != 16, reason="needs AVX-512"),
    ),
    # the transpose's 2-D tile needs vector kernels
    pytest.param(
        "0018-one-level-unchecked",
        "x0.permute(0, 3, 2, 1) * 2",
        marks=requires_vectors,
    ),
    # reach seeds: erf before a failed prepended merge, alone or beside a
    # softmax over strided columns
    ("0020-prepended-member-dropped", "v1[:, 0] + v1[:, 5] * 2.0"),
    ("0020-rest-but-first-dropped", "torch.softmax(v1[:, ::2]"),
    # CPU flex attention needs vector kernels
    pytest.param(
        "0014-scheduler-assumed", "flex_attention(x0", marks=requires_vectors
    ),
    # reads of a transposed producer that no write stride composes
    ("0019-constant-remainder-ignored", "view(v1.shape)\n    return (v1, v2.sum(0))"),
    ("0019-any-stride-divides", "view(47, 65)"),
    # two depth-2 outer-loop fusions whose outer loops differ after re-tiling
    ("0002-differing-outer-levels-merged", "v4 = v2.view(2, 3, 16)"),
    # the same, through the first attempt: stock's kernels, stock's check
    ("0002-first-attempt-stock-check-skipped", "v4 = v2.view(2, 3, 16)"),
    pytest.param(
        "0015-template-members-merged",
        "score_mod=score_mod), x4 * x3",
        marks=requires_vectors,
    ),
]


def _seed_of(marker: str) -> int:
    return next(i for i, case in enumerate(CORPUS) if marker in case.source)


@pytest.fixture(scope="module")
def seeds_pass_without_mutants(tmp_path_factory) -> tuple[dict[int, str], Path]:
    """The feature seeds checked against the installed overlay, in one
    process: each must pass there for its mutant's failure to count.  Their
    flags-off results are kept for the mutants' checks (the store)."""
    markers = [p.values[1] if hasattr(p, "values") else p[1] for p in FEATURE_SEEDS]
    seeds = [_seed_of(marker) for marker in markers]

    def control(out: Path) -> dict:
        store = out / "flags-off"
        statuses = mutants.check_seeds(
            None, seeds, out, log=lambda line: None, one_process=True,
            flags_off_store=store,
        )  # fmt: skip
        return {"statuses": statuses, "store": str(store)}

    done = once_per_run(tmp_path_factory, "feature_seed_control", control)
    statuses = {int(seed): status for seed, status in done["statuses"].items()}
    return statuses, Path(done["store"])  # JSON keys are strings


@pytest.mark.parametrize("ident, marker", FEATURE_SEEDS)
def test_a_feature_seed_kills_its_mutant(
    seeds_pass_without_mutants, tmp_path, ident, marker
):
    """The seeds added for 0017's unrolled rotation (parallel sums, one
    loop collapsed over two), 0014's loop guard (a first pass over two loops, a
    last pass over one), 0015's reduction-first rule (a row sum beside a
    flattened pointwise node), 0005's merge of fused loops over symbolic sizes (a
    softmax over transposed rows), 0015's merge of a fused node whose
    members merge apart, 0003's split (a consumer whose first loop the
    producer's outer extent does not divide, and one whose members loop
    apart), 0018's shallower depth (a transpose tiled over a fused
    level), 0020's split (a UNet block whose fused producer stores into a
    channels-last concat slice), 0021's softmax (bfloat16 logits large
    enough to overflow without the max, rows followed by a dim of size 1)
    0022's GroupNorm (channels-last bfloat16 maps whose channel means
    differ), and the reach seeds of newly reached branches (0020's failed
    prepended merge, 0014 beside a template rendered before the scheduler,
    0019's reads that no write stride composes, 0002's outer loops that
    still differ after the re-tile, 0015's merge meeting a template) pass
    with the installed overlay and fail against the mutant that breaks the
    feature, checked directly."""
    seed = _seed_of(marker)
    mutant = next(m for m in mutants.MUTANTS if m.ident == ident)
    statuses, store = seeds_pass_without_mutants
    assert statuses[seed] == "ok"
    assert any(store.iterdir())  # the mutant compiles with its flags on only
    quiet = dict(log=lambda line: None, flags_off_store=store)
    assert mutants.check_seeds(mutant, [seed], tmp_path, **quiet) == {seed: "ours"}


def test_the_kept_cache_loses_its_least_recently_used_files(tmp_path):
    from tools.fuzz.runner import prune_cache

    for age, name in enumerate(["new", "mid", "old"]):
        path = tmp_path / "sub" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1e9 - age * 1000, 1e9 - age * 1000))
    assert prune_cache(tmp_path, 2500) == 2000
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["mid", "new"]
    assert prune_cache(tmp_path, 10_000) == 2000


def test_a_shared_example_database_is_written_next_to_the_local_one(tmp_path):
    from hypothesis.database import MultiplexedDatabase

    from tools.fuzz.runner import example_database

    db = example_database(str(tmp_path / "shared"))
    assert isinstance(db, MultiplexedDatabase)
    db.save(b"key", b"failing example")
    shared = example_database(str(tmp_path / "shared"))
    assert b"failing example" in set(shared.fetch(b"key"))
    db.delete(b"key", b"failing example")


def test_last_nights_database_is_read_from_a_github_artifact_and_never_written():
    from hypothesis.database import (
        GitHubArtifactDatabase,
        MultiplexedDatabase,
        ReadOnlyDatabase,
    )

    from tools.fuzz.runner import example_database

    db = example_database("github:octo/overlay/fuzz-db")
    assert isinstance(db, MultiplexedDatabase)
    shared = db._wrapped[1]
    assert isinstance(shared, ReadOnlyDatabase)
    inner = shared._wrapped
    assert isinstance(inner, GitHubArtifactDatabase)
    assert (inner.owner, inner.repo, inner.artifact_name) == (
        "octo",
        "overlay",
        "fuzz-db",
    )
    shared.save(b"key", b"value")  # read only: a no-op, no network
    with pytest.raises(ValueError, match="OWNER/REPO"):
        example_database("github:just-a-name")


def test_check_result_flags():
    assert CheckResult("ours", "crash with flags on").crashed
    assert CheckResult("ours", "flags on disagrees with flags off").failed
    assert not CheckResult("stock", "crash with flags on and off").failed


def test_the_nightly_workflow_runs_every_shard_and_merges_them():
    """.github/workflows/fuzz-nightly.yml: the matrix names every shard of
    $SHARDS, each job's `make fuzz` line expands (make -n) to arguments the
    fuzzer accepts, and the merge job reads every shard's run directory."""
    import re
    import shlex

    from tools.fuzz.__main__ import build_parser

    text = (REPO_ROOT / ".github" / "workflows" / "fuzz-nightly.yml").read_text()
    shards = int(re.search(r"SHARDS: (\d+)", text).group(1))
    matrix = re.search(r"shard: \[([\d, ]+)\]", text).group(1)
    assert [int(s) for s in matrix.split(",")] == list(range(1, shards + 1))
    fuzz = re.search(r"make fuzz (.*?)\n\s+env:", text, re.S).group(1)
    values = {
        "github.run_number": "41",
        "matrix.shard": "3",
        "env.SHARDS": "8",
        "inputs.seconds || '3600'": "3600",
        "github.repository": "o/r",
    }
    fuzz = re.sub(r"\$\{\{ (.*?) \}\}", lambda m: values[m.group(1)], fuzz)
    dry = subprocess.run(
        ["make", "-n", "fuzz", *shlex.split(fuzz)], cwd=REPO_ROOT,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    command = dry[dry.index("-m tools.fuzz run") :].replace("\\\n", " ")
    args = build_parser().parse_args(shlex.split(command.split("\n")[0])[2:])
    assert (args.profile, args.shard, args.seed) == ("nightly", "3/8", 41)
    assert str(args.out) == "build/fuzz/shard3"
    assert "FUZZ_DB=github:o/r" in fuzz
    assert "python -m tools.fuzz merge shards/fuzz-shard-*/build/fuzz/shard*" in text


def test_examples_counts_distinct_generated_programs(tmp_path, monkeypatch):
    """Hypothesis repeats programs within a batch and across calls; a worker
    stops after `examples` distinct generated programs, the seed programs
    not counted."""
    from tools.fuzz import corpus, runner

    seeds = list(CORPUS[:3])
    monkeypatch.setattr(corpus, "corpus_for", lambda index, workers: seeds)
    monkeypatch.setattr(check, "check_batch",
                        lambda cases: [CheckResult("ok") for _ in cases])  # fmt: skip
    opts = runner.WorkerOptions(
        index=0, seed=3, examples=10, deadline=1e18, profile="mutants",
        out_dir=tmp_path, repro_dir=tmp_path / "repros", batch=4,
    )  # fmt: skip
    runner.run_worker(opts)
    records = runner._read_records(tmp_path, [0])
    programs = [r["digest"] for r in records if r["type"] == "example"]
    generated = set(programs) - {case.digest() for case in seeds}
    assert len(programs) == len(set(programs))  # each checked once
    assert 10 <= len(generated) < 14  # stops at the first batch past 10
    assert records[-1] == {**records[-1], "type": "done", "reason": "examples"}


_READ_HEAP = """
import ctypes, os
from tools.fuzz.runner import unpoison_children

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
block = libc.malloc(64 * 1024)
fresh = ctypes.string_at(block, 16)
unpoison_children()
print(fresh.hex(), os.environ.get("GLIBC_TUNABLES"))
"""


def test_workers_heap_is_poisoned_and_their_children_are_not():
    """A worker's new memory reads 0x7f (float32 3.4e38), and the C++
    compiler it starts gets the caller's own tunables back."""
    for own in ("", "glibc.malloc.arena_max=2"):
        env = {
            **os.environ,
            "GLIBC_TUNABLES": own,
            **poisoned_env({"GLIBC_TUNABLES": own}),
        }
        done = subprocess.run(
            [sys.executable, "-c", _READ_HEAP], cwd=REPO_ROOT, env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        fresh, children = done.stdout.split()
        assert fresh == "7f" * 16
        assert children == (own or "None")

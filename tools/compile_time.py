"""make bench-compile-time: what the overlay costs at compile time.

    python -m tools.compile_time [--suite mismatch|models|all] [--rounds N]
                                 [--quick] [--only NAME,...] [--without FLAG,...]

Variants: ``stock`` (every overlay flag off), ``lof_off`` (the shipped flags
with loop ordering after fusion off) and ``shipped`` (every flag at its
default); ``--without FLAG,...`` adds a variant ``without:FLAG`` per flag (the
shipped flags with that one off; a flag that requires it then changes
nothing), which says what each feature costs at compile time.

Each (round, variant) runs in a process of its own that first compiles a
warm-up function, then compiles every program of the suite from fresh code
objects with Inductor's caches disabled and one compile thread, so that the
C++ compiler runs as a child of the measuring process.

The figures are CPU seconds, not wall time: the Python side of compiling
(dynamo, lowering, scheduling, codegen: the part the overlay changes) is the
process's own CPU time, the C++ compiler's is its children's.  CPU time moves
far less than wall time when other jobs share the cores, but it still moves
(caches, frequency): variants alternate in order over the rounds and the
report gives the median and range of each, and the ratios of medians.

``--count-calls`` counts instead of timing: the Python function calls of
each compile under ``cProfile``, which do not depend on the machine's load
(one round is enough).  ``--profile-out DIR`` also writes each variant's
merged profile (``pstats``) there, to look for the hot spots.

Suites: ``mismatch`` is the 13 programs of reductions over a middle dimension
with broadcasting consumers (test/test_outer_block_fusion.py's
MISMATCH_PROGRAMS); ``models`` is tools/bench_models.py's timed models;
``fuzz`` is the fuzzer's seed programs (tools/fuzz/corpus.py), each under
its own config.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "bench" / "results"
VARIANTS = ("stock", "lof_off", "shipped")


WITHOUT = "without:"


def variant_config(variant: str) -> dict[str, bool]:
    """The config patch of a variant: stock, lof_off, shipped or without:FLAG."""
    from fusion_overlay.flags import FLAGS, config_patch, shipped_config

    if variant == "stock":
        return config_patch(False)
    shipped = shipped_config()
    if variant == "lof_off":
        shipped["cpp.loop_ordering_after_fusion"] = False
    elif variant.startswith(WITHOUT):
        flag = variant.removeprefix(WITHOUT).removeprefix("cpp.")
        if flag not in {f.name for f in FLAGS}:
            raise SystemExit(f"compile_time: no overlay flag cpp.{flag}")
        shipped[f"cpp.{flag}"] = False
    elif variant != "shipped":
        raise SystemExit(f"compile_time: unknown variant {variant!r}")
    return shipped


def mismatch_programs(quick: bool):
    """(name, fn, args) of the 13 middle-dimension reduction programs."""
    import torch

    sys.path.insert(0, str(REPO_ROOT / "test"))
    from test_outer_block_fusion import MISMATCH_PROGRAMS

    for name, fn, shape, dtype, _, _ in MISMATCH_PROGRAMS:
        yield name, fn, (torch.randn(shape, dtype=dtype),)


def model_programs(quick: bool):
    from tools.bench_models import MODELS

    for spec in MODELS:
        if spec.timed:
            module, args = spec.build(quick)
            yield spec.name, module, tuple(args)


def fuzz_seed_programs(quick: bool):
    """(name, fn, args, config) of the fuzzer's seed programs, each under its
    own config (seed config, threads), compiled with static sizes."""
    from tools.fuzz.check import case_config
    from tools.fuzz.corpus import CORPUS

    for i, case in enumerate(CORPUS):
        config = case_config(case, overlay=False)
        yield f"seed{i:02d}", case.build(), tuple(case.make_inputs()), config


SUITES = {
    "mismatch": mismatch_programs,
    "models": model_programs,
    "fuzz": fuzz_seed_programs,
}


def _cpu_seconds() -> tuple[float, float]:
    own = time.process_time()
    children = os.times()
    return own, children.children_user + children.children_system


def child(
    suite: str, variant: str, quick: bool, only: set[str], profile_out: str = ""
) -> dict:
    """Compile the suite once under ``variant``; CPU seconds per program, and
    with ``profile_out`` the Python calls per program (the merged profile is
    written to ``profile_out/<suite>-<variant>.pstats``)."""
    import cProfile
    import pstats

    import torch
    from torch._inductor import config

    from tools.bench import _fresh

    patch = {**variant_config(variant), "force_disable_caches": True}
    with config.patch(patch), torch.no_grad():
        torch.compile(_fresh(lambda x: x.sin() + 1))(torch.randn(8))
    per_program = {}
    merged: pstats.Stats | None = None
    for name, fn, args, *program_config in SUITES[suite](quick):
        if only and name not in only:
            continue
        torch._dynamo.reset()
        own0, kids0 = _cpu_seconds()
        wall0 = time.perf_counter()
        target = fn if isinstance(fn, torch.nn.Module) else _fresh(fn)
        # a program's own config (the fuzz seeds') under the variant's flags
        program_patch = {**(program_config[0] if program_config else {}), **patch}
        profiler = cProfile.Profile() if profile_out else None
        with config.patch(program_patch), torch.no_grad():
            if profiler:
                profiler.enable()
            torch.compile(target, fullgraph=True)(*args)
            if profiler:
                profiler.disable()
        own1, kids1 = _cpu_seconds()
        per_program[name] = {
            "python_cpu_s": own1 - own0,
            "cxx_cpu_s": kids1 - kids0,
            "wall_s": time.perf_counter() - wall0,
        }
        if profiler:
            stats = pstats.Stats(profiler)
            per_program[name]["python_calls"] = stats.total_calls  # type: ignore[attr-defined]
            merged = stats if merged is None else merged.add(stats)
    if merged is not None:
        Path(profile_out).mkdir(parents=True, exist_ok=True)
        merged.dump_stats(str(Path(profile_out) / f"{suite}-{variant}.pstats"))
    return per_program


def _run_child(suite, variant, quick, only, profile_out="") -> dict:
    cmd = [sys.executable, "-m", "tools.compile_time", "--child", variant]
    cmd += ["--suite", suite, "--only", ",".join(sorted(only))]
    cmd += ["--quick"] if quick else []
    cmd += ["--profile-out", profile_out] if profile_out else []
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    done = subprocess.run(
        cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"compile_time: {variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _totals(per_program: dict) -> dict[str, float]:
    keys = ["python_cpu_s", "cxx_cpu_s", "wall_s"]
    if all("python_calls" in p for p in per_program.values()):
        keys.append("python_calls")
    totals = {k: sum(p[k] for p in per_program.values()) for k in keys}
    totals["cpu_s"] = totals["python_cpu_s"] + totals["cxx_cpu_s"]
    return totals


def measure(
    suite: str,
    rounds: int,
    quick: bool,
    only: set[str],
    profile_out: str = "",
    variants: tuple[str, ...] = VARIANTS,
) -> dict:
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for variant in order:
            runs[variant].append(_run_child(suite, variant, quick, only, profile_out))
            total = _totals(runs[variant][-1])
            print(f"{suite} round {r} {variant}: {json.dumps(total)}", flush=True)
    return runs


def summarize(runs: dict[str, list[dict]]) -> dict:
    summary = {}
    for variant, per_round in runs.items():
        totals = [_totals(p) for p in per_round]
        summary[variant] = {
            key: {
                "median": statistics.median(t[key] for t in totals),
                "min": min(t[key] for t in totals),
                "max": max(t[key] for t in totals),
            }
            for key in totals[0]
        }
    for variant in summary:
        if variant == "stock":
            continue
        summary[variant]["ratio_to_stock"] = {
            key: summary[variant][key]["median"] / summary["stock"][key]["median"]
            for key in ("python_cpu_s", "cxx_cpu_s", "cpu_s", "wall_s", "python_calls")
            if key in summary[variant]
        }
    return summary


def markdown(suite: str, summary: dict, rounds: int) -> str:
    lines = [
        f"### Compile time, suite `{suite}` ({rounds} rounds, CPU seconds)",
        "",
        "| variant | Python CPU s (median, range) | C++ compiler CPU s | both | wall s "
        "| Python / stock | C++ / stock | both / stock |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for variant, s in summary.items():
        ratio = s.get("ratio_to_stock", {})

        def cell(key, s=s):
            v = s[key]
            return f"{v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})"

        lines.append(
            f"| {variant} | {cell('python_cpu_s')} | {cell('cxx_cpu_s')} "
            f"| {cell('cpu_s')} | {cell('wall_s')} "
            f"| {ratio.get('python_cpu_s', 1):.3f} | {ratio.get('cxx_cpu_s', 1):.3f} "
            f"| {ratio.get('cpu_s', 1):.3f} |"
        )
    return "\n".join(lines) + "\n"


def markdown_calls(suite: str, summary: dict) -> str:
    lines = [
        f"### Compile time, suite `{suite}`: Python calls under cProfile",
        "",
        "| variant | Python calls | / stock |",
        "| --- | --- | --- |",
    ]
    for variant, s in summary.items():
        ratio = s.get("ratio_to_stock", {}).get("python_calls", 1)
        calls = s["python_calls"]["median"]
        lines.append(f"| {variant} | {calls / 1e6:.2f} M | {ratio:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="mismatch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument(
        "--count-calls",
        action="store_true",
        help="count Python calls under cProfile (deterministic; one round)",
    )
    parser.add_argument("--profile-out", default="", help="write merged pstats here")
    parser.add_argument(
        "--without",
        default="",
        help="FLAG,...: add the shipped flags with that one off as a variant",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    only = {name for name in opts.only.split(",") if name}
    variants = VARIANTS + tuple(
        f"{WITHOUT}{flag}" for flag in opts.without.split(",") if flag
    )
    for variant in variants:
        variant_config(variant)  # an unknown flag fails before anything runs
    if opts.child:
        variant_config(opts.child)
        result = child(opts.suite, opts.child, opts.quick, only, opts.profile_out)
        print(json.dumps(result))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    suites = list(SUITES) if opts.suite == "all" else [opts.suite]
    profile_out = opts.profile_out
    if opts.count_calls:
        opts.rounds = 1
        profile_out = profile_out or str(REPO_ROOT / "build" / "compile-time-profiles")
    for suite in suites:
        runs = measure(suite, opts.rounds, opts.quick, only, profile_out, variants)
        summary = summarize(runs)
        if opts.count_calls:
            text = markdown_calls(suite, summary)
        else:
            text = markdown(suite, summary, opts.rounds)
        print(text)
        kind = "_calls" if opts.count_calls else ""
        kind += "_features" if opts.without else ""
        stem = RESULTS / f"compile_time_{suite}{kind}"
        stem.with_suffix(".md").write_text(text)
        data = {"rounds": opts.rounds, "quick": opts.quick, "summary": summary}
        stem.with_suffix(".json").write_text(
            json.dumps({**data, "runs": runs}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Counted, not timed: the benchmarks' cases where patched and stock differ.

    python -m tools.bench_counts [--suite main|shapes|upstream-ops] [--only a,b]
                                 [--calls N] [--check]

Timings on a shared machine move by up to 2x between runs; instruction and
simulated cache-miss counts do not.  For every workload of a benchmark suite
(``make bench``'s main suite, ``make bench-shapes``, or the shape lists of
upstream's operator benchmarks that ``make bench-models`` replays) this
compiles stock (every overlay flag off) and patched (the flags as shipped),
each in its own process and Inductor cache, one thread, and compares the
generated C++ kernels.  Where they are the same, the counts are equal by
construction and nothing is run.  Where they differ, both variants run N
calls under ``valgrind --tool=callgrind --cache-sim=yes`` (instrumented only
around those calls; see tools/callgrind_counts.py, whose AVX2 build and
32 MiB last-level cache this shares) and the table gives instructions and
first-level and last-level misses per call, patched / stock.

A case where patched executes more instructions or misses the last-level
cache more often than stock (by more than TOLERANCE) is marked; ``--check``
then exits 1.  Counts are a proxy for time, not time: a kernel with fewer
misses and a few more instructions can be either faster or slower.  And the
simulation is blind to two of the overlay's features: it counts a prefetch
as an instruction that moves nothing (0014) and a non-temporal store as a
store through the cache (0013); the table names them where the patched
kernels use them.  Results: bench/results/counts_<suite>.md and .json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fusion_overlay import flags
from tools import callgrind_counts
from tools.bench import RESULTS_DIR

TOLERANCE = 0.01  # counts within 1% of stock's are the same work
SUITES = ("main", "shapes", "upstream-ops", "pyhpc")
VARIANTS = ("stock", "patched")
# Helpers the patched kernels call whose effect the cache simulation misses.
UNMODELLED = {"prefetch": "prefetch_ahead(", "streaming": "stream_store_f32("}


def workloads(suite: str) -> list:
    from tools import bench, bench_models

    if suite in bench.SUITES:
        return bench.SUITES[suite][1]()
    if suite == "upstream-ops":
        cases = bench_models.upstream_cases(quick=False)
        return [bench_models.op_workload(case) for case in cases]
    if suite == "pyhpc":
        from tools import torchbench

        return torchbench.pyhpc_workloads()  # from $TORCHBENCH_SRC
    raise ValueError(f"unknown suite {suite!r}")


def _workload(suite: str, name: str):
    import torch

    torch.manual_seed(0)
    (found,) = [w for w in workloads(suite) if w.name == name]
    fn, args, _ = found.make()
    return fn, args


def child_codegen(suite: str, name: str, out: Path) -> None:
    """Compile one workload; write its kernels and loop nests to ``out``."""
    import torch

    from tools.bench import _output_code
    from tools.loopnest import count_nests, split_kernels

    fn, args = _workload(suite, name)
    compiled = torch.compile(fn, dynamic=False)
    with torch.no_grad(), _output_code() as code:
        compiled(*args)
    text = code.getvalue()
    out.write_text(
        json.dumps({"kernels": split_kernels(text), "nests": count_nests(text)})
    )


def child_run(suite: str, name: str, calls: int) -> None:
    """Warm-up calls, then ``calls`` calls between the callgrind markers."""
    import torch

    from tools.bench import _output_code

    marker = ctypes.CDLL(str(callgrind_counts.WORK / "marker.so"))
    fn, args = _workload(suite, name)
    compiled = torch.compile(fn, dynamic=False)
    with torch.no_grad():
        with _output_code():  # the codegen child's config: a cache hit
            compiled(*args)
        for _ in range(2):
            compiled(*args)
        marker.cg_start()
        for _ in range(calls):
            compiled(*args)
        marker.cg_stop()


def _env(variant: str, base: dict[str, str], work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in flags.ENV_VARS}
    env.update(base)
    if variant == "stock":
        env.update(flags.env_all_off())
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / f"cache-{variant}")
    env["OMP_NUM_THREADS"] = "1"
    env["OMP_WAIT_POLICY"] = "passive"
    return env


def _child(suite: str, mode: str, name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tools.bench_counts", "--suite", suite,
            "--child", mode, "--workload", name, *extra]  # fmt: skip


def generated_code(
    suite: str, name: str, variant: str, base: dict[str, str], work: Path
) -> dict:
    """The kernels and loop nests of one workload compiled as ``variant``."""
    out = work / f"{name}.{variant}.json"
    command = _child(suite, "codegen", name, "--out", str(out))
    subprocess.run(command, env=_env(variant, base, work), check=True,
                   capture_output=True)  # fmt: skip
    return json.loads(out.read_text())


def count_case(opts, name: str, base: dict[str, str], work: Path) -> dict:
    """One workload: its code in both variants, and its counts if they differ."""
    row: dict = {"workload": name}
    kernels = {}
    for variant in VARIANTS:
        result = generated_code(opts.suite, name, variant, base, work)
        kernels[variant] = result["kernels"]
        row[f"nests_{variant}"] = result["nests"]
    row["same_code"] = kernels["stock"] == kernels["patched"]
    if row["same_code"]:
        return row
    row["unmodelled"] = [
        feature
        for feature, call in UNMODELLED.items()
        if any(call in kernel for kernel in kernels["patched"])
    ]
    for variant in VARIANTS:
        dump = work / f"callgrind.{name}.{variant}"
        env = _env(variant, base, work)
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--cache-sim=yes",
             "--LL=33554432,16,64", "--instr-atstart=no",
             f"--callgrind-out-file={dump}",
             *_child(opts.suite, "run", name, "--calls", str(opts.calls))],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        (dumped,) = work.glob(f"callgrind.{name}.{variant}.*")
        totals, groups = callgrind_counts.read_counts(dumped)
        row[variant] = {
            "Ir": totals["Ir"] / opts.calls,
            "kernel_Ir": groups["compiled kernel"] / opts.calls,
            "I1_misses": totals.get("I1mr", 0) / opts.calls,
            "D1_misses": (totals["D1mr"] + totals["D1mw"]) / opts.calls,
            "LL_misses": (totals["DLmr"] + totals["DLmw"]) / opts.calls,
        }
    for key in ("Ir", "I1_misses", "D1_misses", "LL_misses"):
        row[f"{key}_ratio"] = row["patched"][key] / max(row["stock"][key], 1)
    row["worse"] = [
        key for key in ("Ir", "LL_misses") if row[f"{key}_ratio"] > 1 + TOLERANCE
    ]
    return row


def markdown(rows: list[dict], suite: str, calls: int) -> str:
    lines = [
        f"# Counts: {suite} suite, 1 thread, AVX2, {calls} calls, per call",
        "",
        "| workload | nests stock→patched | C++ | Ir stock | Ir patched/stock "
        "| I1 misses patched/stock | D1 misses patched/stock | LL misses stock "
        "| LL misses patched/stock | |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        nests = f"{r['nests_stock']}→{r['nests_patched']}"
        if r["same_code"]:
            lines.append(f"| {r['workload']} | {nests} | same | | | | | | | |")
            continue
        mark = "more " + ", ".join(r["worse"]) if r["worse"] else ""
        if r.get("unmodelled"):
            mark += f" (uses {', '.join(r['unmodelled'])})"
        lines.append(
            f"| {r['workload']} | {nests} | differs | {r['stock']['Ir']:,.0f} "
            f"| {r['Ir_ratio']:.3f} | {r['I1_misses_ratio']:.3f} "
            f"| {r['D1_misses_ratio']:.3f} "
            f"| {r['stock']['LL_misses']:,.0f} | {r['LL_misses_ratio']:.3f} | {mark} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=SUITES, default="main")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a case does more work than stock")  # fmt: skip
    parser.add_argument("--child", choices=["codegen", "run"], help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child == "codegen":
        child_codegen(opts.suite, opts.workload, opts.out)
        return 0
    if opts.child == "run":
        child_run(opts.suite, opts.workload, opts.calls)
        return 0
    names = [w.name for w in workloads(opts.suite)]
    only = [n for n in opts.only.split(",") if n]
    unknown = sorted(set(only) - set(names))
    if unknown:
        parser.error(f"no workload {', '.join(unknown)} in suite {opts.suite}")
    base = callgrind_counts._prepare()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_counts.") as tmp:
        for name in [n for n in names if not only or n in only]:
            row = count_case(opts, name, base, Path(tmp))
            rows.append(row)
            print(markdown([row], opts.suite, opts.calls).splitlines()[-1], flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / f"counts_{opts.suite.replace('-', '_')}"
    stem.with_suffix(".md").write_text(markdown(rows, opts.suite, opts.calls))
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(f"wrote {stem}.md")
    worse = [r["workload"] for r in rows if r.get("worse")]
    if worse:
        print(f"more instructions or last-level misses than stock: {', '.join(worse)}")
    return 1 if opts.check and worse else 0


if __name__ == "__main__":
    sys.exit(main())

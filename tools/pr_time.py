"""Upstream's PR-time compile benchmarks that run on CPU, stock against patched.

    python -m tools.pr_time --src DIR [--only NAME,...] [--markdown FILE]

Upstream measures every PR with ``benchmarks/dynamo/pr_time_benchmarks/``:
each benchmark compiles a program a few times and reports the instructions
spent compiling, and ``expected_results.csv`` gives each one a margin
(mostly 1.5%).  ``DIR`` is that directory (in a PyTorch checkout, or its
files fetched on their own; they are never committed here), holding
``benchmarks/benchmark_base.py``, the benchmark files and
``expected_results.csv``.

Upstream counts with the CPU's instruction counter (``perf_event_open``),
which machines without a PMU, such as most containers, lack.  Here the
counter is valgrind: each benchmark runs in a process under ``cachegrind``
(no cache simulation) once with one iteration of its work and once with
two, and the difference is the instructions of one warm iteration, start-up
and imports excluded, as upstream's minimum over its iterations excludes
them.  The C++ compiler runs in child processes, which valgrind does not
follow: the count is the Python side, as upstream's is.  Valgrind cannot
run AVX-512, so on x86 the kernels are compiled for AVX2 on both sides.

Every iteration compiles from scratch: Inductor's caches are disabled
(``TORCHINDUCTOR_FORCE_DISABLE_CACHES``), so that lowering and scheduling,
the part the overlay changes, run in each one.  Upstream's ``add_loop``
keeps the FX graph cache, so its later iterations may skip them: the
figures here are the stricter measure of the same programs.

Sides: ``stock`` is the pristine torch of ``.venv-stock`` (no overlay
module is imported); ``patched`` is ``.venv``'s torch with the shipped
flags.
"""

from __future__ import annotations

import argparse
import csv
import gc
import importlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# The benchmarks of upstream's list that compile with Inductor on CPU: name
# -> module.  The others run on GPU, or use the eager or export backends,
# whose code the overlay does not change.
CPU_BENCHMARKS = {
    "add_loop_inductor": "add_loop",
    "basic_modules_ListOfLinears_inductor": "basic_modules_benchmarks",
    "symint_sum": "symint_sum",
    "symint_sum_loop": "symint_sum",
}

SIDES = {"stock": ".venv-stock", "patched": ".venv"}

# Valgrind does not decode AVX-512, and Inductor picks its vector ISA and
# -march=native from the CPU, not from what valgrind emulates: on x86 the
# kernels a benchmark runs are compiled for AVX2 (both sides alike).
VALGRIND_ISA = (
    {"ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}
    if platform.machine() in ("x86_64", "AMD64")
    else {}
)


class PrTimeError(Exception):
    """A missing or incomplete benchmark directory."""


def expected_margins(src: Path) -> dict[str, tuple[int, float]]:
    """name -> (expected instructions, relative margin) from expected_results.csv."""
    out = {}
    with (src / "expected_results.csv").open() as f:
        for row in csv.reader(f):
            if len(row) >= 4 and row[1] == "compile_time_instruction_count":
                out[row[0]] = (int(row[2]), float(row[3]))
    return out


def check_source(src: Path, names: list[str]) -> None:
    problems = []
    if not (src / "expected_results.csv").is_file():
        problems.append(f"{src}/expected_results.csv")
    for name in ["benchmark_base", *(CPU_BENCHMARKS[n] for n in names)]:
        if not (src / "benchmarks" / f"{name}.py").is_file():
            problems.append(f"{src}/benchmarks/{name}.py")
    if problems:
        raise PrTimeError(
            "not upstream's pr_time_benchmarks directory (set PR_TIME_SRC to "
            "<pytorch>/benchmarks/dynamo/pr_time_benchmarks); missing: "
            + ", ".join(sorted(set(problems)))
        )


# --- the measured process ---------------------------------------------------


def child(src: Path, name: str, iterations: int) -> None:
    """Run the benchmark ``name`` through its module's main(), ``iterations``
    times, and no other benchmark of the module."""
    sys.path.insert(0, str(src / "benchmarks"))
    import benchmark_base
    import torch._dynamo.config as dynamo_config

    def collect_all(self):
        self.results = []
        if self.name() != name:
            return self  # before _prepare_once: a GPU benchmark never starts
        self._prepare_once()
        # as upstream's counting loop: no collection inside the work
        with dynamo_config.patch("enable_cpp_symbolic_shape_guards", False):
            gc.disable()
            try:
                for _ in range(iterations):
                    self._prepare()
                    gc.collect()
                    self._work()
            finally:
                gc.enable()
        return self

    benchmark_base.BenchmarkBase.collect_all = collect_all
    benchmark_base.BenchmarkBase.append_results = lambda self, path: None
    module = importlib.import_module(CPU_BENCHMARKS[name])
    sys.argv = [str(module.__file__), os.devnull]
    module.main()


# --- the parent ----------------------------------------------------------------


def _instructions(out_file: Path) -> int:
    for line in out_file.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out_file}")


def count(python: Path, src: Path, name: str, iterations: int) -> int:
    """Instructions of a process running ``iterations`` of the benchmark."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cachegrind.out"
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONHASHSEED": "0",  # the same set and dict orders in every run
            **VALGRIND_ISA,
            "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor"),
        }
        cmd = [
            "valgrind", "--tool=cachegrind", "--cache-sim=no",
            f"--cachegrind-out-file={out}", str(python), "-m", "tools.pr_time",
            "--child", name, "--iterations", str(iterations), "--src", str(src),
        ]  # fmt: skip
        done = subprocess.run(
            cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"{name} failed under {python}:\n{done.stderr[-3000:]}")
        return _instructions(out)


def measure(src: Path, name: str, log=print) -> dict[str, int]:
    """side -> instructions of one warm iteration (two minus one)."""
    out = {}
    for side, venv in SIDES.items():
        python = REPO_ROOT / venv / "bin" / "python"
        one, two = (count(python, src, name, n) for n in (1, 2))
        out[side] = two - one
        log(f"  {name} {side}: {out[side]:,} instructions ({one:,} / {two:,})")
    return out


def compare(name: str, counts: dict[str, int], margin: float) -> dict:
    """A row of the table: within when patched exceeds stock by at most the
    margin upstream allows the benchmark."""
    ratio = counts["patched"] / counts["stock"]
    return {"name": name, **counts, "ratio": ratio, "margin": margin,
            "within": ratio - 1 <= margin}  # fmt: skip


def markdown(rows: list[dict]) -> str:
    lines = [
        "| benchmark | stock | patched | patched / stock | upstream's margin "
        "| within |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['stock'] / 1e9:.2f} G | {r['patched'] / 1e9:.2f} G "
            f"| {r['ratio']:.3f} | +{r['margin'] * 100:.1f}% "
            f"| {'yes' if r['within'] else '**no**'} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pr_time", description=__doc__
    )
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--only", default="", help="benchmark names, comma-separated")
    parser.add_argument("--markdown", type=Path, help="write the table here too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.src, args.child, args.iterations)
        return 0
    names = [n for n in args.only.split(",") if n] or list(CPU_BENCHMARKS)
    unknown = [n for n in names if n not in CPU_BENCHMARKS]
    if unknown:
        parser.error(f"not a CPU benchmark: {unknown} (known: {list(CPU_BENCHMARKS)})")
    try:
        check_source(args.src, names)
    except PrTimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    margins = expected_margins(args.src)
    rows = []
    for name in names:
        if name not in margins:
            print(f"  {name}: not in expected_results.csv, skipped")
            continue
        rows.append(compare(name, measure(args.src, name), margins[name][1]))
    table = markdown(rows)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0 if all(r["within"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

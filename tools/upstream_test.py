"""Run upstream's own inductor CPU suites on stock and patched torch, and compare.

    python -m tools.upstream_test run --pytorch-src DIR [--tests FILES] [-k EXPR]
                                      [--shard I/N] [-n WORKERS] [--variants ...]
    python -m tools.upstream_test merge RUN_DIR [RUN_DIR ...] [--out DIR]

The test files come from the user's PyTorch checkout (DIR/test/...) or from a
directory that holds upstream's ``test/inductor`` files; torch comes from the
venvs: .venv (patched) and .venv-stock (pristine).  Each test file runs on
its own, once per torch, with a fresh TORCHINDUCTOR_CACHE_DIR and pytest
started from DIR/test, as upstream's run_test.py does, so that DIR/torch (an
unbuilt source tree) is never imported.

A run writes ``run.json`` (what ran, where, how long, with which exit code)
and one junit file per file and torch into its directory.  ``merge`` reads
one or more such directories (the shards of one selection, run anywhere) and
writes the one report: per file and torch the totals and wall time, new
failures (pass on stock, fail on patched), new passes, and which new
failures the series explains (tools/upstream_expectations.py).  It exits 1
on an unexplained new failure, a run that says nothing (crash, timeout) or
a missing shard.  ``run`` merges its own directory at the end.

``--shard I/N`` keeps the tests whose id hashes to I among N (stable over
machines and pytest-xdist workers; the plugin tools/upstream_compat.py does
the selection), so a CI matrix runs one shard per job and a last job merges.

A variant sets environment variables for both runs.  Variables that only
the overlay reads (fusion_overlay/flags.py) change nothing on stock torch, so a
variant made of those reuses the plain stock run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tools import shards
from fusion_overlay.flags import ENV_VARS
from fusion_overlay.patchset import REPO_ROOT
from tools.upstream_expectations import EXPECTED_CHANGES, ExpectedChange

# The CPU suites and, per file, the -k selection that keeps its CPU part.
# test_torchinductor*.py define one class per device; the OpInfo suite is
# parametrized by device and dtype: float32 is what a CPU user compiles,
# bfloat16 the low-precision type with vectorized C++ kernels on CPU.
SUITES = {
    "test/inductor/test_cpu_repro.py": "",
    "test/inductor/test_torchinductor.py": "CpuTests",
    "test/inductor/test_torchinductor_dynamic_shapes.py": "DynamicShapesCpuTests",
    "test/inductor/test_loop_ordering.py": "",
    "test/inductor/test_torchinductor_opinfo.py": "cpu and (float32 or bfloat16)",
}
DEFAULT_OUT = REPO_ROOT / "build" / "upstream-test"
OVERLAY_ONLY_ENV = set(ENV_VARS)
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
COUNTED = (PASSED, FAILED, SKIPPED)
COMPAT_PLUGIN = Path(__file__).with_name("upstream_compat.py")
SHARD_ENV = "UPSTREAM_TEST_SHARD"
MANIFEST = "run.json"
# pytest's exit codes that still mean "the tests ran and reported":
# 0 all passed, 1 some failed, 5 none selected (an empty shard of a file).
REPORTING_EXIT_CODES = (0, 1, 5)


class UsageError(Exception):
    """The checkout, the selection or the run directories cannot be used."""


def check_source(src: str | None, tests: list[str]) -> Path:
    if not src:
        raise UsageError(
            "set PYTORCH_SRC=/path/to/pytorch (a checkout, or a directory with "
            "upstream's test/inductor/ files; only its test files are used)"
        )
    root = Path(src).expanduser()
    if not root.is_dir():
        raise UsageError(f"PYTORCH_SRC={src} is not a directory")
    if not (root / "test" / "inductor").is_dir():
        raise UsageError(
            f"PYTORCH_SRC={src} has no test/inductor/: not a PyTorch checkout"
        )
    if not tests:
        raise UsageError("no test files selected (UPSTREAM_TESTS is empty)")
    for test in tests:
        if not (root / test).is_file():
            raise UsageError(f"PYTORCH_SRC={src} has no {test}")
    return root.resolve()


def parse_shard(text: str) -> tuple[int, int]:
    try:
        return shards.parse_shard(text)
    except ValueError as error:
        raise UsageError(str(error)) from None


def parse_variant(text: str) -> dict[str, str]:
    env = {}
    for item in shlex.split(text):
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"variant {text!r}: expected NAME=VALUE, got {item!r}")
        env[name] = value
    return env


def parse_variants(text: str) -> list[dict[str, str]]:
    return [parse_variant(part) for part in text.split(";") if part.strip()]


def variant_label(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items())


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")


def selection(tests: list[str], k: str | None) -> dict[str, str]:
    """Per file, its -k expression: the given one for every file, or the
    file's own from SUITES (none for a file SUITES does not list)."""
    return {t: k if k is not None else SUITES.get(t, "") for t in tests}


# --------------------------------------------------------------------------
# One pytest run: one file on one torch


@dataclasses.dataclass
class FileRun:
    label: str  # "stock", "patched", "patched ENV=1", ...
    test_file: str
    shard: str  # "I/N"
    junit: str  # relative to the run directory
    log: str
    returncode: int
    seconds: float
    torch_file: str
    k: str


def parse_junit(path: Path) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    if not path.is_file():
        return outcomes
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:  # a run killed while pytest wrote it
        return outcomes
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".lstrip(".")
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = FAILED
        elif case.find("skipped") is not None:
            outcomes.setdefault(name, SKIPPED)
        else:
            outcomes[name] = PASSED
    return outcomes


def torch_location(python: Path, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__file__, torch.__version__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise UsageError(f"{python} cannot import torch:\n{proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclasses.dataclass
class RunSettings:
    src: Path
    out: Path
    shard: str
    workers: int
    pytest_args: list[str]
    timeout: float | None


def run_file(
    settings: RunSettings,
    label: str,
    python: Path,
    test_file: str,
    k: str,
    extra_env: dict[str, str],
) -> FileRun:
    test_dir = settings.src / "test"
    rel = f"{slug(label)}/{Path(test_file).stem}"
    junit, log = settings.out / f"{rel}.xml", settings.out / f"{rel}.log"
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
        plugin_dir = Path(cache) / "plugins"
        plugin_dir.mkdir()
        shutil.copy(COMPAT_PLUGIN, plugin_dir / COMPAT_PLUGIN.name)
        env = {
            **os.environ,
            **extra_env,
            "TORCHINDUCTOR_CACHE_DIR": cache,
            "PYTHONDONTWRITEBYTECODE": "1",
            # Only the compat plugin: nothing of this repo shadows upstream's.
            "PYTHONPATH": str(plugin_dir),
            SHARD_ENV: settings.shard,
        }
        where = torch_location(python, test_dir, env)
        if str(settings.src) in where.split()[0]:
            raise UsageError(f"{python} imports the checkout's torch ({where})")
        cmd = [
            str(python), "-m", "pytest",
            str((settings.src / test_file).relative_to(test_dir)),
            *(["-k", k] if k else []),
            *(["-n", str(settings.workers)] if settings.workers > 1 else []),
            "-p", "no:cacheprovider", "-p", COMPAT_PLUGIN.stem,
            f"--junitxml={junit}", "-q", *settings.pytest_args,
        ]  # fmt: skip
        print(f"-- {label} [{settings.shard}]: {shlex.join(cmd)}", flush=True)
        start = time.perf_counter()
        with log.open("w") as log_file:
            log_file.write(f"# {label}\n# torch: {where}\n# {shlex.join(cmd)}\n")
            log_file.flush()
            try:
                returncode = subprocess.run(
                    cmd,
                    cwd=test_dir,
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    timeout=settings.timeout,
                ).returncode
            except subprocess.TimeoutExpired:
                returncode = -1
        seconds = time.perf_counter() - start
    run = FileRun(
        label, test_file, settings.shard, f"{rel}.xml", f"{rel}.log", returncode,
        seconds, where, k,
    )  # fmt: skip
    outcomes = parse_junit(junit)
    print(
        f"   {count(outcomes, PASSED)} passed, {count(outcomes, FAILED)} failed, "
        f"{count(outcomes, SKIPPED)} skipped in {seconds:.0f} s (exit {returncode})",
        flush=True,
    )
    return run


def count(outcomes: dict[str, str], outcome: str) -> int:
    return sum(1 for o in outcomes.values() if o == outcome)


def write_manifest(out: Path, shard: str, runs: list[FileRun], pairs) -> None:
    data = {
        "shard": shard,
        "runs": [dataclasses.asdict(r) for r in runs],
        "comparisons": [list(p) for p in pairs],
    }
    (out / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")


# --------------------------------------------------------------------------
# Merging run directories into one report


@dataclasses.dataclass
class LabelResult:
    """One torch (a label) over every file and shard merged."""

    label: str
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # per file
    file_counts: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)

    def count(self, outcome: str) -> int:
        return count(self.outcomes, outcome)


@dataclasses.dataclass
class Comparison:
    stock: LabelResult
    patched: LabelResult

    def _ids(self, stock_outcome: str, patched_outcome: str) -> list[str]:
        return sorted(
            name
            for name, outcome in self.patched.outcomes.items()
            if outcome == patched_outcome
            and self.stock.outcomes.get(name) == stock_outcome
        )

    @property
    def new_failures(self) -> list[str]:
        return self._ids(PASSED, FAILED)

    @property
    def new_passes(self) -> list[str]:
        return self._ids(FAILED, PASSED)

    @property
    def only_one_side(self) -> list[str]:
        return sorted(set(self.stock.outcomes) ^ set(self.patched.outcomes))


def broken(run: FileRun, outcomes: dict[str, str]) -> str | None:
    """Why a run says nothing about its tests (None when it does)."""
    where = f"{run.test_file} [{run.shard}]"
    if run.returncode == -1:
        return f"{where} timed out after {run.seconds:.0f} s"
    if run.returncode not in REPORTING_EXIT_CODES:
        return (
            f"{where}: pytest exited {run.returncode} (crash or collection error); "
            f"see {run.log}"
        )
    if not outcomes and run.returncode != 5:
        return f"{where}: no test results; see {run.log}"
    return None


def load_runs(
    dirs: list[Path],
) -> tuple[dict[str, LabelResult], list[tuple], list[str]]:
    """The labels' merged results, the comparisons, and what is missing.

    Each file on each torch (label) must be covered on its own: by a whole
    run (shard 1/1), or by every shard of one split; a run of one side only
    (``run --sides``), or of other files, merges with the other runs."""
    labels: dict[str, LabelResult] = {}
    pairs: list[tuple] = []
    covered: dict[str, dict[int, set[int]]] = {}  # "label file" -> count -> shards
    for run_dir in dirs:
        manifest = run_dir / MANIFEST
        if not manifest.is_file():
            raise UsageError(f"{run_dir} has no {MANIFEST}: not an upstream-test run")
        data = json.loads(manifest.read_text())
        i, n = parse_shard(data["shard"])
        for pair in data["comparisons"]:
            if tuple(pair) not in pairs:
                pairs.append(tuple(pair))
        for what in {f"{r['label']} {Path(r['test_file']).name}" for r in data["runs"]}:
            got = covered.setdefault(what, {}).setdefault(n, set())
            if i in got:
                raise UsageError(f"shard {i}/{n} given twice ({run_dir}, {what})")
            got.add(i)
        for raw in data["runs"]:
            _add_run(labels, run_dir, FileRun(**raw))
    return labels, pairs, coverage_problems(covered)


def _add_run(labels: dict[str, LabelResult], run_dir: Path, run: FileRun) -> None:
    outcomes = parse_junit(run_dir / run.junit)
    result = labels.setdefault(run.label, LabelResult(run.label))
    overlap = set(outcomes) & set(result.outcomes)
    if overlap:
        raise UsageError(
            f"{run_dir}: {len(overlap)} tests of {run.label} also in another "
            f"directory (e.g. {min(overlap)}): shards overlap"
        )
    result.outcomes.update(outcomes)
    result.seconds[run.test_file] = result.seconds.get(run.test_file, 0.0) + run.seconds
    counts = result.file_counts.setdefault(run.test_file, {})
    for outcome in COUNTED:
        counts[outcome] = counts.get(outcome, 0) + count(outcomes, outcome)
    problem = broken(run, outcomes)
    if problem:
        result.problems.append(problem)


def coverage_problems(covered: dict[str, dict[int, set[int]]]) -> list[str]:
    problems = []
    for label, by_count in covered.items():
        if 1 in by_count:
            continue  # a whole run
        if len(by_count) > 1:
            problems.append(f"{label}: runs split in different shard counts")
            continue
        ((n, got),) = by_count.items()
        missing = sorted(set(range(1, n + 1)) - got)
        if missing:
            problems.append(
                f"{label}: missing shard(s) {', '.join(f'{i}/{n}' for i in missing)}"
            )
    return problems


def explained(test_id: str) -> ExpectedChange | None:
    """The series' reason for a new failure, or None."""
    for suffix, change in EXPECTED_CHANGES.items():
        if test_id == suffix or test_id.endswith("." + suffix):
            return change
    return None


def report(
    header: str, labels: dict[str, LabelResult], pairs, shard_problems: list[str]
) -> tuple[str, bool]:
    """A markdown report and whether the overlay added no unexplained failure."""
    lines = [header, ""]
    ok = not shard_problems
    lines += [f"- **incomplete:** {p}" for p in shard_problems]
    lines += [
        "| torch | file | passed | failed | skipped | wall time |",
        "|---|---|---|---|---|---|",
    ]
    for result in labels.values():
        for test_file, counts in result.file_counts.items():
            lines.append(
                f"| {result.label} | `{Path(test_file).name}` | {counts[PASSED]} | "
                f"{counts[FAILED]} | {counts[SKIPPED]} | "
                f"{result.seconds[test_file]:.0f} s |"
            )
    for stock_label, patched_label in pairs:
        if stock_label not in labels or patched_label not in labels:
            continue  # a run of one side: its totals only
        c = Comparison(labels[stock_label], labels[patched_label])
        lines += ["", f"**{patched_label}** vs **{stock_label}**:"]
        problems = c.stock.problems + c.patched.problems
        if problems:
            ok = False
            lines += [f"- not comparable: {p}" for p in problems]
        unexplained = [t for t in c.new_failures if not explained(t)]
        ok &= not unexplained
        lines.append(
            "- new failures (pass on stock, fail on patched), unexplained: "
            + (", ".join(unexplained) if unexplained else "none")
        )
        for test_id in c.new_failures:
            change = explained(test_id)
            if change:
                lines.append(
                    f"- new failure explained by {change.patch}: {test_id}: "
                    f"{change.reason}"
                )
        lines.append(
            "- new passes (fail on stock, pass on patched): "
            + (", ".join(c.new_passes) if c.new_passes else "none")
        )
        one_side = c.only_one_side
        if one_side:
            shown = ", ".join(one_side[:10]) + (", ..." if len(one_side) > 10 else "")
            lines.append(f"- ran on one side only: {len(one_side)} tests: {shown}")
    return "\n".join(lines), ok


def merge(
    dirs: list[Path], out: Path, header: str | None = None, one_shard: bool = False
) -> int:
    """Write the report of ``dirs``; ``one_shard``: the run of one shard
    reports its own tests, without asking for the other shards."""
    labels, pairs, shard_problems = load_runs(dirs)
    if one_shard:
        shard_problems = []
    header = header or (
        "Upstream tests, merged from "
        + ", ".join(str(d) for d in dirs)
        + "; fresh TORCHINDUCTOR_CACHE_DIR per file and torch."
    )
    text, ok = report(header, labels, pairs, shard_problems)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text + "\n")
    print()
    print(text)
    print(f"\nsummary: {out / 'summary.md'}")
    return 0 if ok else 1


# --------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.upstream_test", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suites on stock and patched torch")
    run.add_argument("--pytorch-src", default=os.environ.get("PYTORCH_SRC"))
    run.add_argument(
        "--tests",
        default=" ".join(SUITES),
        help="test files, relative to the checkout, space-separated",
    )
    run.add_argument(
        "-k", default=None, help="pytest -k for every file (default: SUITES' own)"
    )
    run.add_argument("--shard", default="1/1", help="I/N: this shard of N")
    run.add_argument(
        "--sides",
        default="stock,patched",
        help="which torch to run: stock, patched or both (a side run apart "
        "merges with the other's runs)",
    )
    run.add_argument(
        "-n", "--workers", type=int, default=1, help="pytest-xdist workers"
    )
    run.add_argument(
        "--variants",
        default="",
        help='extra runs: "ENV=1 ENV2=0;ENV3=1" (";" separates variants)',
    )
    run.add_argument(
        "--patched-python", type=Path, default=REPO_ROOT / ".venv/bin/python"
    )
    run.add_argument(
        "--stock-python", type=Path, default=REPO_ROOT / ".venv-stock/bin/python"
    )
    run.add_argument("--out", type=Path, default=DEFAULT_OUT)
    run.add_argument("--timeout", type=float, default=None, help="seconds per file")
    run.add_argument(
        "--pytest-args", default="", help="more pytest arguments (shell-split)"
    )
    run.add_argument(
        "--check-only",
        action="store_true",
        help="only check PYTORCH_SRC and the selection (make upstream-test does "
        "this before building the venvs)",
    )
    merge_cmd = sub.add_parser("merge", help="one report from run directories")
    merge_cmd.add_argument("dirs", type=Path, nargs="+")
    merge_cmd.add_argument("--out", type=Path, default=DEFAULT_OUT / "merged")
    return parser


def run_main(args) -> int:
    tests = args.tests.split()
    src = check_source(args.pytorch_src, tests)
    variants = parse_variants(args.variants)
    parse_shard(args.shard)
    if args.check_only:
        return 0
    for python in (args.patched_python, args.stock_python):
        if not python.exists():
            raise UsageError(f"{python} does not exist (make install stock-venv)")
    if args.workers < 1:
        raise UsageError(f"-n {args.workers}: need at least one worker")
    # pytest writes junit files from the checkout's test/: absolute paths
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / MANIFEST).unlink(missing_ok=True)
    settings = RunSettings(
        src, args.out, args.shard, args.workers, shlex.split(args.pytest_args),
        args.timeout,
    )  # fmt: skip
    runs: list[FileRun] = []
    pairs: list[tuple[str, str]] = [("stock", "patched")]
    sides: list[tuple[str, Path, dict[str, str]]] = [
        ("stock", args.stock_python, {}),
        ("patched", args.patched_python, {}),
    ]
    for env in variants:
        label = variant_label(env)
        # stock torch does not read the overlay's own variables
        stock_label = "stock" if set(env) <= OVERLAY_ONLY_ENV else f"stock {label}"
        if stock_label != "stock":
            sides.append((stock_label, args.stock_python, env))
        sides.append((f"patched {label}", args.patched_python, env))
        pairs.append((stock_label, f"patched {label}"))
    wanted = set(args.sides.split(","))
    if not wanted or not wanted <= {"stock", "patched"}:
        raise UsageError(f"--sides {args.sides!r}: stock, patched or stock,patched")
    sides = [side for side in sides if side[0].split()[0] in wanted]
    for test_file, k in selection(tests, args.k).items():
        for label, python, env in sides:
            runs.append(run_file(settings, label, python, test_file, k, env))
            write_manifest(args.out, args.shard, runs, pairs)
    header = (
        f"Upstream tests from {src}, shard {args.shard}: "
        + ", ".join(
            f"`{Path(t).name}`" + (f' -k "{k}"' if k else "")
            for t, k in selection(tests, args.k).items()
        )
        + "; fresh TORCHINDUCTOR_CACHE_DIR per file and torch."
    )
    return merge([args.out], args.out, header, one_shard=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "merge":
            return merge(args.dirs, args.out)
        return run_main(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

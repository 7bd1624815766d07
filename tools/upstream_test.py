"""Run a selection of upstream's own inductor CPU tests on stock and patched torch.

    python -m tools.upstream_test --pytorch-src DIR [--tests FILES] [-k EXPR]
                                  [--variants "ENV=1 ENV2=0;ENV3=1"]

The test files come from the user's PyTorch checkout (DIR/test/...), the
torch from the venvs: .venv (patched) and .venv-stock (pristine).  Every run
gets a fresh TORCHINDUCTOR_CACHE_DIR and runs pytest from DIR/test, as
upstream's run_test.py does, so that DIR/torch (an unbuilt source tree) is
never imported.  Then it prints, per variant, what the overlay changed: new
failures (pass on stock, fail on patched), new passes, and the totals.

A variant sets environment variables for both runs.  Variables that only
the overlay reads (tools/flags.py) change nothing on stock torch,
so a variant made of those reuses the plain stock run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tools.flags import ENV_VARS
from tools.patchset import REPO_ROOT

DEFAULT_TESTS = "test/inductor/test_cpu_repro.py"
DEFAULT_K = "outer_loop or local_buffer or group_norm or layer_norm or softmax"
DEFAULT_OUT = REPO_ROOT / "build" / "upstream-test"
OVERLAY_ONLY_ENV = set(ENV_VARS)
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
COMPAT_PLUGIN = Path(__file__).with_name("upstream_compat.py")


class UsageError(Exception):
    """The checkout or the selection cannot be used; nothing was run."""


def check_source(src: str | None, tests: list[str]) -> Path:
    if not src:
        raise UsageError(
            "set PYTORCH_SRC=/path/to/pytorch (a checkout with test/inductor/; "
            "only its test files are used)"
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


# --------------------------------------------------------------------------
# One pytest run


@dataclasses.dataclass
class RunResult:
    label: str
    outcomes: dict[str, str]  # test id -> passed / failed / skipped
    returncode: int
    seconds: float
    log: Path
    torch_file: str

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)


def parse_junit(path: Path) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    if not path.is_file():
        return outcomes
    for case in ET.parse(path).getroot().iter("testcase"):
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


def run_pytest(
    label: str,
    python: Path,
    src: Path,
    tests: list[str],
    k: str,
    extra_env: dict[str, str],
    out_dir: Path,
    pytest_args: list[str],
    timeout: float | None,
) -> RunResult:
    slug = "".join(c if c.isalnum() else "_" for c in label).strip("_")
    junit = out_dir / f"{slug}.xml"
    log = out_dir / f"{slug}.log"
    junit.unlink(missing_ok=True)
    test_dir = src / "test"
    # Paths relative to test/, where upstream runs its tests from.
    args = [str((src / t).relative_to(test_dir)) for t in tests]
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
        }
        where = torch_location(python, test_dir, env)
        if str(src) in where.split()[0]:
            raise UsageError(f"{python} imports the checkout's torch ({where})")
        cmd = [
            str(python), "-m", "pytest", *args,
            *(["-k", k] if k else []),
            "-p", "no:cacheprovider", "-p", COMPAT_PLUGIN.stem,
            f"--junitxml={junit}", "-q", *pytest_args,
        ]  # fmt: skip
        print(f"-- {label}: {shlex.join(cmd)}", flush=True)
        start = time.perf_counter()
        with log.open("w") as log_file:
            log_file.write(f"# {label}\n# torch: {where}\n# {shlex.join(cmd)}\n")
            log_file.flush()
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=test_dir,
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                )
                returncode = proc.returncode
            except subprocess.TimeoutExpired:
                returncode = -1
        seconds = time.perf_counter() - start
    result = RunResult(label, parse_junit(junit), returncode, seconds, log, where)
    print(
        f"   {result.count(PASSED)} passed, {result.count(FAILED)} failed, "
        f"{result.count(SKIPPED)} skipped in {seconds:.0f} s (exit {returncode}); "
        f"log {log}",
        flush=True,
    )
    return result


# --------------------------------------------------------------------------
# Comparison


@dataclasses.dataclass
class Comparison:
    stock: RunResult
    patched: RunResult

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


def broken(run: RunResult) -> str | None:
    """Why a run says nothing about the tests (None when it does)."""
    if run.returncode == -1:
        return "timed out"
    if run.returncode not in (0, 1):
        return f"pytest exited {run.returncode} (collection error?); see {run.log}"
    if not run.outcomes:
        return f"no test results; see {run.log}"
    return None


def report(header: str, comparisons: list[Comparison]) -> tuple[str, bool]:
    """A markdown summary and whether the overlay added no failure."""
    runs: list[RunResult] = []
    for c in comparisons:
        for run in (c.stock, c.patched):
            if run not in runs:
                runs.append(run)
    lines = [
        header,
        "",
        "| run | passed | failed | skipped | time |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.label} | {run.count(PASSED)} | {run.count(FAILED)} | "
            f"{run.count(SKIPPED)} | {run.seconds:.0f} s |"
        )
    ok = True
    for c in comparisons:
        lines += ["", f"**{c.patched.label}** vs **{c.stock.label}**:"]
        problems = [p for p in (broken(c.stock), broken(c.patched)) if p]
        if problems:
            ok = False
            lines += [f"- not comparable: {p}" for p in problems]
            continue
        failures, passes = c.new_failures, c.new_passes
        ok &= not failures
        lines.append(
            "- new failures (pass on stock, fail on patched): "
            + (", ".join(failures) if failures else "none")
        )
        lines.append(
            "- new passes (fail on stock, pass on patched): "
            + (", ".join(passes) if passes else "none")
        )
        if c.only_one_side:
            lines.append("- ran on one side only: " + ", ".join(c.only_one_side))
    return "\n".join(lines), ok


# --------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.upstream_test", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--pytorch-src", default=os.environ.get("PYTORCH_SRC"))
    parser.add_argument(
        "--tests",
        default=DEFAULT_TESTS,
        help="test files, relative to the checkout, space-separated",
    )
    parser.add_argument("-k", default=DEFAULT_K, help="pytest -k expression")
    parser.add_argument(
        "--variants",
        default="",
        help='extra runs: "ENV=1 ENV2=0;ENV3=1" (";" separates variants)',
    )
    parser.add_argument(
        "--patched-python", type=Path, default=REPO_ROOT / ".venv/bin/python"
    )
    parser.add_argument(
        "--stock-python", type=Path, default=REPO_ROOT / ".venv-stock/bin/python"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run")
    parser.add_argument(
        "--pytest-args", default="", help="more pytest arguments (shell-split)"
    )
    parser.add_argument(
        "--check-only",
        action="store_true",
        help="only check PYTORCH_SRC and the selection (make upstream-test does "
        "this before building the venvs)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tests = args.tests.split()
    try:
        src = check_source(args.pytorch_src, tests)
        variants = parse_variants(args.variants)
        if args.check_only:
            return 0
        for python in (args.patched_python, args.stock_python):
            if not python.exists():
                raise UsageError(f"{python} does not exist (make install stock-venv)")
        args.out.mkdir(parents=True, exist_ok=True)
        pytest_args = shlex.split(args.pytest_args)

        def run(label: str, python: Path, env: dict[str, str]) -> RunResult:
            return run_pytest(
                label, python, src, tests, args.k, env, args.out, pytest_args,
                args.timeout,
            )  # fmt: skip

        stock = run("stock", args.stock_python, {})
        patched = run("patched", args.patched_python, {})
        comparisons = [Comparison(stock, patched)]
        for env in variants:
            label = variant_label(env)
            if set(env) <= OVERLAY_ONLY_ENV:
                variant_stock = stock  # stock torch does not read these
            else:
                variant_stock = run(f"stock {label}", args.stock_python, env)
            variant = run(f"patched {label}", args.patched_python, env)
            comparisons.append(Comparison(variant_stock, variant))
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    header = (
        f"Upstream tests `{' '.join(tests)}`"
        + (f' -k "{args.k}"' if args.k else "")
        + f" from {src}; fresh TORCHINDUCTOR_CACHE_DIR per run."
    )
    text, ok = report(header, comparisons)
    print()
    print(text)
    (args.out / "summary.md").write_text(text + "\n")
    print(f"\nsummary: {args.out / 'summary.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

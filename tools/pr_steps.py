"""Run an exported commit's tests against the partial tree at that commit.

`make pr` assembles the series in a partial v2.13.0 tree: only the upstream
files the series touches, our modules and the exported tests.  To run a
commit's tests there, `StepRunner` lays that tree over the pristine torch
2.13.0 of the stock venv: a directory whose ``torch/`` holds symlinks to the
stock package, except for the directories on the way to a file of the
partial tree, which are real and hold that file.  The stock venv's Python
runs pytest with that directory first on ``PYTHONPATH``, so ``import torch``
gives 2.13.0 with exactly the commits up to this one.  The stock venv itself
is only read.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path

PASSED, FAILED, SKIPPED, MISSING = "passed", "failed", "skipped", "not run"


@dataclasses.dataclass
class StepCheck:
    """The tests one commit adds or changes, and how they did at that commit."""

    results: dict[str, dict[str, str]]  # test file -> test -> status
    seconds: float = 0.0
    promoted: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(
            s == status for tests in self.results.values() for s in tests.values()
        )

    @property
    def green(self) -> bool:
        return all(
            s in (PASSED, SKIPPED)
            for tests in self.results.values()
            for s in tests.values()
        )


def overlay_tree(site_packages: Path, tree: Path, dest: Path) -> Path:
    """dest/torch: stock torch from site_packages with tree/torch's files on top."""
    ours = sorted(
        p.relative_to(tree).as_posix()
        for p in (tree / "torch").rglob("*")
        if p.is_file()
    )
    real_dirs = {"torch"}
    for rel in ours:
        parts = rel.split("/")[:-1]
        real_dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for rel_dir in sorted(real_dirs):
        (dest / rel_dir).mkdir(parents=True, exist_ok=True)
        stock = site_packages / rel_dir
        if not stock.is_dir():
            continue
        for entry in stock.iterdir():
            rel = f"{rel_dir}/{entry.name}"
            if rel in real_dirs or entry.name == "__pycache__":
                continue
            (dest / rel).symlink_to(entry)
    for rel in ours:
        target = dest / rel
        if target.is_symlink():
            target.unlink()
        shutil.copyfile(tree / rel, target)
    return dest


def junit_outcomes(
    junit: Path, functions: dict[str, list[str]]
) -> dict[str, dict[str, str]]:
    """{file: {test function: status}} from pytest's junit XML.

    A parametrized test function passes when every instance passes or is
    skipped; instances are matched to functions by the longest name prefix."""
    results = {dest: dict.fromkeys(names, MISSING) for dest, names in functions.items()}
    if not junit.is_file():
        return results
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("file") or ""
        classname = case.get("classname") or ""
        name = case.get("name") or ""
        for dest, names in functions.items():
            stem = Path(dest).stem
            if stem not in classname and stem not in path:
                continue
            owner = max(
                (n for n in names if name == n or name.startswith((n + "_", n + "["))),
                key=len,
                default=None,
            )
            if owner is None:
                continue
            if case.find("failure") is not None or case.find("error") is not None:
                status = FAILED
            elif case.find("skipped") is not None:
                status = SKIPPED
            else:
                status = PASSED
            current = results[dest][owner]
            rank = {MISSING: 0, SKIPPED: 1, PASSED: 2, FAILED: 3}
            if current == MISSING or (
                rank[status] > rank[current]
                and not (current == PASSED and status == SKIPPED)
            ):
                results[dest][owner] = status
    return results


class StepRunner:
    """Runs selected tests of a partial tree over the stock venv's torch."""

    def __init__(self, site_packages: Path, python: Path | None = None, log=None):
        self.site_packages = site_packages
        self.python = python or _venv_python(site_packages)
        self.cache = Path(tempfile.mkdtemp(prefix="fusion-overlay-steps-cache-"))
        self.log = log or (lambda line: print(line, file=sys.stderr))

    def close(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)

    def __call__(
        self, label: str, tree: Path, functions: dict[str, list[str]]
    ) -> dict[str, dict[str, str]]:
        functions = {d: n for d, n in functions.items() if n}
        if not functions:
            return {}
        with tempfile.TemporaryDirectory(prefix="fusion-overlay-step-") as tmp:
            root = Path(tmp)
            overlay_tree(self.site_packages, tree, root)
            tests_dir = root / "test" / "inductor"
            shutil.copytree(tree / "test" / "inductor", tests_dir)
            junit = root / "junit.xml"
            names = sorted({n for ns in functions.values() for n in ns})
            command = [
                str(self.python), "-m", "pytest", "-p", "no:cacheprovider", "-q",
                "-o", "junit_family=xunit1", f"--junitxml={junit}",
                "-k", " or ".join(names), *sorted(Path(d).name for d in functions),
            ]  # fmt: skip
            env = {
                **os.environ,
                "PYTHONPATH": str(root),
                "TORCHINDUCTOR_CACHE_DIR": str(self.cache),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            for key in [k for k in env if k.startswith("TORCHINDUCTOR_CPP_")]:
                del env[key]  # the flags' defaults, as the tests expect
            self.log(f"{label}: {len(names)} test(s) in {', '.join(sorted(functions))}")
            proc = subprocess.run(
                command, cwd=tests_dir, env=env, capture_output=True, text=True
            )
            results = junit_outcomes(junit, functions)
            if proc.returncode not in (0, 1, 5):
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
                self.log(
                    f"{label}: pytest exited {proc.returncode}:\n" + "\n".join(tail)
                )
            failed = [n for r in results.values() for n, s in r.items() if s == FAILED]
            if failed:
                self.log(f"{label}: failed {', '.join(failed)}")
            return results


def _venv_python(site_packages: Path) -> Path:
    venv = site_packages.parent.parent.parent
    for name in ("python", "python3"):
        candidate = venv / "bin" / name
        if candidate.exists():
            return candidate
    return Path(sys.executable)


def format_checks(
    rows: Sequence[tuple[str, StepCheck | None]],
    placements: Iterable[tuple[str, str, str]] = (),
) -> list[str]:
    """A markdown table of the per-commit checks."""
    lines = [
        "| commit | tests run | passed | skipped | failed | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, check in rows:
        if check is None:
            lines.append(f"| {name} | 0 | | | | |")
            continue
        run = sum(len(t) for t in check.results.values())
        lines.append(
            f"| {name} | {run} | {check.count(PASSED)} | {check.count(SKIPPED)} | "
            f"{check.count(FAILED) + check.count(MISSING)} | {check.seconds:.0f} |"
        )
    return lines

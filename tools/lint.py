"""Lint like upstream: ruff, then mypy on tools/ and on the overlay modules.

    python -m tools.lint [--no-mypy]

Run it with .venv's python (`make lint`): ruff and mypy are installed there,
and the overlay modules are type-checked as the modules they become,
torch._inductor.*, inside .venv's patched torch, because they import the
patched upstream modules relatively.  That needs the overlay applied and
current (`make install`); the paths mypy reports are mapped back to overlay/.

Only files git tracks are linted, so a colleague's unstaged new file does not
break `make test`; settings are in pyproject.toml ([tool.ruff], [tool.mypy]).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

from fusion_overlay.patchset import REPO_ROOT, load_overlay_files

LINT_DIRS = ("fusion_overlay", "tools", "test", "overlay", "examples")


def tracked_python_files(*dirs: str) -> list[str]:
    proc = subprocess.run(
        ["git", "ls-files", "--", *(f"{d}/*.py" for d in dirs), "*.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    files = sorted(set(proc.stdout.split()))
    wanted = tuple(f"{d}/" for d in dirs)
    return [f for f in files if f.startswith(wanted) and (REPO_ROOT / f).is_file()]


def overlay_modules() -> dict[str, str]:
    """torch/... path of each overlay module -> its module name."""
    return {
        rel: rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for rel in load_overlay_files()
        if rel.endswith(".py")
    }


def installed_torch_root() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise SystemExit("error: no torch in this interpreter; run `make install`")
    return Path(spec.origin).resolve().parent.parent


def check_overlay_installed(root: Path) -> list[str]:
    """The overlay modules whose installed copy differs from overlay/."""
    stale = []
    for rel, data in load_overlay_files().items():
        installed = root / rel
        if not installed.is_file() or installed.read_bytes() != data:
            stale.append(rel)
    return stale


def run(title: str, cmd: list[str], rewrite: dict[str, str] | None = None) -> bool:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    output = (proc.stdout + proc.stderr).strip()
    for old, new in (rewrite or {}).items():
        output = output.replace(old, new)
    seconds = time.perf_counter() - start
    status = "ok" if proc.returncode == 0 else "FAILED"
    print(f"== {title}: {status} ({seconds:.1f} s)")
    if output and proc.returncode != 0:
        print(output)
    return proc.returncode == 0


def overlay_path_rewrite(root: Path) -> dict[str, str]:
    """mypy's paths of the installed modules -> their overlay/ sources."""
    prefixes = {f"{root}/torch/"}
    if root.is_relative_to(REPO_ROOT):
        prefixes.add(f"{root.relative_to(REPO_ROOT)}/torch/")
    return dict.fromkeys(sorted(prefixes, key=len, reverse=True), "overlay/torch/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lint")
    parser.add_argument("--no-mypy", action="store_true", help="ruff only")
    args = parser.parse_args(argv)

    python = sys.executable
    ok = run(
        "ruff check",
        [python, "-m", "ruff", "check", "--quiet", "--output-format", "concise"]
        + tracked_python_files(*LINT_DIRS),
    )
    if args.no_mypy:
        return 0 if ok else 1

    ok &= run(
        "mypy fusion_overlay/ tools/",
        [python, "-m", "mypy", *tracked_python_files("fusion_overlay", "tools")],
    )

    root = installed_torch_root()
    stale = check_overlay_installed(root)
    if stale:
        print(
            "== mypy overlay/: FAILED: the installed copies are not current "
            f"(run `make install`): {', '.join(stale)}"
        )
        return 1
    modules = [arg for name in overlay_modules().values() for arg in ("-m", name)]
    ok &= run(
        "mypy overlay/ (as torch._inductor.* in .venv's patched torch)",
        [python, "-m", "mypy", *modules],
        rewrite=overlay_path_rewrite(root),
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

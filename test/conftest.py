"""Shared fixtures: the repo's venvs and throwaway torch trees built from them.

No upstream PyTorch file is committed to this repo; tests that need pristine
files of the release under test (the venvs' torch, RELEASE) copy them from the
stock venv, or from the overlay's own backups in the patched venv.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
STOCK_VENV = REPO_ROOT / ".venv-stock"
PATCHED_VENV = REPO_ROOT / ".venv"

sys.path.insert(0, str(REPO_ROOT))  # tools/, also when it is not pip-installed

from fusion_overlay.overlay import pristine_bytes, read_state  # noqa: E402
from fusion_overlay.patchset import DEFAULT_PATCHES_DIR, load_manifest, MANIFEST_NAME  # noqa: E402
from fusion_overlay.flags import RELEASE  # noqa: E402  (the running torch's release)


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads(N) before the tests: N above the core count "
        "is honoured this way, where OMP_NUM_THREADS is capped",
    )


def pytest_configure(config) -> None:
    threads = config.getoption("--torch-threads")
    if threads:
        import torch

        torch.set_num_threads(threads)
        assert torch.get_num_threads() == threads, torch.get_num_threads()


def venv_site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    return found[0] if found and (found[0] / "torch").is_dir() else None


def venv_python(venv: Path) -> Path | None:
    python = venv / "bin" / "python"
    return python if python.exists() else None


def pristine_source_roots() -> list[Path]:
    roots = [venv_site_packages(STOCK_VENV), venv_site_packages(PATCHED_VENV)]
    return [root for root in roots if root is not None]


def read_pristine(rel: str) -> bytes:
    """Pristine torch RELEASE bytes of `rel`, from whichever venv has them."""
    for root in pristine_source_roots():
        data = pristine_bytes(root, read_state(root), rel)
        if data is not None:
            return data
    pytest.skip(f"no torch {RELEASE} venv to copy pristine files from: make install")


def write_pristine_torch(root: Path, version: str | None = f"{RELEASE}+cpu") -> Path:
    """A minimal torch/ under `root`: every pinned upstream file, pristine."""
    torch_dir = root / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "__init__.py").write_text(
        "# test stub: only the pinned files are real\n"
    )
    if version is not None:
        (torch_dir / "version.py").write_text(f"__version__ = '{version}'\n")
    for rel in load_manifest(DEFAULT_PATCHES_DIR / MANIFEST_NAME):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(read_pristine(rel))
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path (byte code excluded)."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture
def site_packages(tmp_path: Path) -> Path:
    """A throwaway site-packages dir with pristine torch RELEASE files."""
    return write_pristine_torch(tmp_path / "site-packages")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fake PyTorch source checkout of RELEASE (no build, just the layout)."""
    root = write_pristine_torch(tmp_path / "pytorch", version=None)
    (root / "setup.py").write_text(
        "raise SystemExit('stub: not a real PyTorch checkout')\n"
    )
    (root / "version.txt").write_text(f"{RELEASE}\n")
    return root


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], object]):
    """``build(workdir)`` (a JSON value) computed once per test run, by
    whichever pytest-xdist worker asks first; the others wait and read it.
    A module fixture is otherwise built once by every worker that runs one of
    the module's tests.  A build that raises leaves nothing, so the next
    asker builds again."""
    base = tmp_path_factory.getbasetemp()
    if base.name.startswith("popen-gw"):  # an xdist worker's: the run's is above
        base = base.parent
    done = base / f"{name}.json"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            workdir = base / name
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir()
            partial = done.with_suffix(".partial")
            partial.write_text(json.dumps(build(workdir)))
            partial.rename(done)
    return json.loads(done.read_text())

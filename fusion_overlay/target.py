"""Where the overlay goes: a site-packages dir or a PyTorch source checkout.

Both hold a `torch/` package; we call the directory that contains it the
target root, because the patches apply with -p1 from there.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path


# The local label an overlay wheel adds to torch's version (tools/wheel.py):
# "2.13.0+cpu.fusion.14.h1a2b3c4d" -> "fusion.14.h1a2b3c4d".
_FUSION_LABEL_RE = re.compile(r"[+.](fusion\.[0-9]+\.h[0-9a-f]{8})$")


class TargetError(Exception):
    """The target is not a torch tree we can work on."""


@dataclass(frozen=True)
class Target:
    root: Path  # the directory that contains torch/
    kind: str  # "site-packages" or "source"
    version: str | None  # None when the tree does not say
    version_origin: str | None  # the file the version was read from

    @property
    def torch_dir(self) -> Path:
        return self.root / "torch"


def resolve_target(arg: str | Path | None = None) -> Target:
    root = default_target_root() if arg is None else _root_from_arg(Path(arg))
    kind = "source" if is_source_checkout(root) else "site-packages"
    version, origin = read_torch_version(root)
    return Target(root, kind, version, origin)


def default_target_root() -> Path:
    """The dir holding the running interpreter's torch, found without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise TargetError(
            "no torch importable from this interpreter; pass --target DIR"
        )
    return Path(spec.origin).resolve().parent.parent


def _root_from_arg(path: Path) -> Path:
    path = path.expanduser().resolve()
    if not path.is_dir():
        raise TargetError(f"target {path} is not a directory")
    if (path / "torch").is_dir():
        return path
    if path.name == "torch" and (path / "__init__.py").is_file():
        return path.parent  # --target pointed at the torch package itself
    raise TargetError(
        f"target {path} has no torch/ package: pass a site-packages dir, a PyTorch "
        "source checkout, or the torch/ folder itself"
    )


def is_source_checkout(root: Path) -> bool:
    return (root / "setup.py").is_file() and (root / "version.txt").is_file()


def read_torch_version(root: Path) -> tuple[str | None, str | None]:
    """torch/version.py (wheels, built trees) first, else version.txt (checkouts)."""
    version_py = root / "torch" / "version.py"
    if version_py.is_file():
        match = re.search(
            r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py.read_text(), re.M
        )
        if match:
            return match.group(1), str(version_py)
    version_txt = root / "version.txt"
    if is_source_checkout(root):
        return version_txt.read_text().strip(), str(version_txt)
    return None, None


def check_version(target: Target) -> str | None:
    """The supported release the target's torch is, or None when nothing says
    (the pinned file hashes then pick the series); TargetError for any other
    release, naming the supported ones."""
    from fusion_overlay.patchset import release_of, supported_releases

    if target.version is None:
        return None
    supported = supported_releases()
    release = release_of(target.version)
    if release not in supported:
        raise TargetError(
            f"{target.version_origin} says torch {target.version}; the overlay "
            f"supports torch {', '.join(supported)}"
        )
    return release


def fusion_label(version: str | None) -> str | None:
    """The overlay wheel's label in a torch version, or None for any other torch."""
    match = _FUSION_LABEL_RE.search(version or "")
    return match.group(1) if match else None

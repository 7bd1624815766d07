"""The patch series, the overlay modules and the pinned upstream hashes.

Everything the overlay tool needs to know about *our* side: which patches in
which order, which upstream files they touch (read from the diffs themselves,
never listed by hand), which new modules the overlay adds, and the sha256 each
touched upstream file must have in a pristine torch of each supported release.

One series per upstream release, in `patches/<release>/` (series, patches,
pins), each derived from the same per-feature history (tools/series_repo.py);
the supported releases are the folders that hold a series, nothing else.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def _series_data(checkout: Path, installed: Path) -> Path:
    """The checkout's top-level folder when the tool runs from a checkout;
    else the copy installed with the package (setup.cfg's package_dir)."""
    return checkout if checkout.is_dir() else installed


PATCHES_ROOT = _series_data(REPO_ROOT / "patches", PACKAGE_DIR / "patches")
DEFAULT_OVERLAY_DIR = _series_data(REPO_ROOT / "overlay", PACKAGE_DIR / "torch_overlay")
SERIES_NAME = "series"
MANIFEST_NAME = "upstream-sha256.txt"

# "@@ -start[,count] +start[,count] @@": a missing count means 1.
_HUNK_HEADER = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# A release folder's name, and the release a torch version string names:
# "2.14.1", "2.14.1+cu130", "2.14.1a0+git..." -> "2.14.1"; not "2.14.10".
_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_RELEASE_PREFIX = re.compile(r"([0-9]+\.[0-9]+\.[0-9]+)(?![0-9])")
# The release `make` and the tools default to: the newest one that installs
# here without a download (the Makefile's TORCH default says the same).
DEFAULT_RELEASE = "2.14.1"


class SeriesError(Exception):
    """The patch series, a patch, the manifest or the overlay is malformed."""


def supported_releases(patches_root: Path = PATCHES_ROOT) -> tuple[str, ...]:
    """Every release with a series folder, oldest first."""
    found = [
        d.name
        for d in Path(patches_root).iterdir()
        if d.is_dir() and _RELEASE.fullmatch(d.name) and (d / SERIES_NAME).is_file()
    ]
    return tuple(sorted(found, key=release_key))


def release_key(release: str) -> tuple[int, ...]:
    """"2.14.1" -> (2, 14, 1): releases sort and compare by this."""
    return tuple(int(n) for n in release.split("."))


def release_of(version: str | None) -> str | None:
    """The release a torch version string names ("2.14.1+cu130" -> "2.14.1")."""
    match = _RELEASE_PREFIX.match(version or "")
    return match.group(1) if match else None


def patches_dir_for(release: str, patches_root: Path = PATCHES_ROOT) -> Path:
    """The series folder of a supported release; SeriesError names the others."""
    supported = supported_releases(patches_root)
    if release not in supported:
        raise SeriesError(
            f"no series for torch {release}; supported: {', '.join(supported)}"
        )
    return Path(patches_root) / release


def default_release() -> str:
    """The running interpreter's torch release where a series supports it (read
    from torch/version.py, without importing torch); with no torch to ask, the
    FUSION_OVERLAY_TORCH environment variable (make sets it to TORCH), else
    DEFAULT_RELEASE."""
    from fusion_overlay.target import TargetError, default_target_root
    from fusion_overlay.target import read_torch_version

    supported = supported_releases()
    try:
        version, _ = read_torch_version(default_target_root())
    except TargetError:
        chosen = os.environ.get("FUSION_OVERLAY_TORCH", "")
        return chosen if chosen in supported else DEFAULT_RELEASE
    release = release_of(version)
    return release if release in supported else DEFAULT_RELEASE


# The series the tools use when no torch tree is named: the running torch's.
DEFAULT_PATCHES_DIR = PATCHES_ROOT / default_release()


def sha256_bytes(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileChange:
    """One file section of a patch; `path` is relative to the dir holding torch/."""

    path: str
    creates: bool = False
    deletes: bool = False


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    data: bytes
    changes: tuple[FileChange, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Series:
    patches_dir: Path
    patches: tuple[Patch, ...]
    manifest: dict[str, str]  # torch/... path -> pristine sha256

    @property
    def release(self) -> str:
        """The upstream release this series applies to: its folder's name."""
        return self.patches_dir.name

    def numbers(self) -> list[str]:
        """The patches' numbers ("0002", ...), in series order."""
        return [patch.name[:4] for patch in self.patches]

    def touched_paths(self) -> list[str]:
        """Every path any patch touches, in first-touched order."""
        seen: dict[str, None] = {}
        for patch in self.patches:
            for change in patch.changes:
                seen.setdefault(change.path, None)
        return list(seen)

    def created_paths(self) -> set[str]:
        """Paths the series creates, i.e. that do not exist upstream."""
        created: set[str] = set()
        existing: set[str] = set()
        for patch in self.patches:
            for change in patch.changes:
                if change.path in created or change.path in existing:
                    continue
                (created if change.creates else existing).add(change.path)
        return created


def load_series(patches_dir: Path = DEFAULT_PATCHES_DIR) -> Series:
    patches_dir = Path(patches_dir)
    series_file = patches_dir / SERIES_NAME
    if not series_file.is_file():
        raise SeriesError(f"no series file at {series_file}")
    names = _read_series_names(series_file)
    patches = tuple(_load_patch(patches_dir, name) for name in names)
    manifest = load_manifest(patches_dir / MANIFEST_NAME)
    return Series(patches_dir, patches, manifest)


def _read_series_names(series_file: Path) -> list[str]:
    names: list[str] = []
    for lineno, raw in enumerate(series_file.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *options = line.split()
        # quilt allows per-patch options; we only ever use -p1.
        if options not in ([], ["-p1"]):
            raise SeriesError(f"{series_file}:{lineno}: unsupported options {options}")
        if name in names:
            raise SeriesError(f"{series_file}:{lineno}: {name} listed twice")
        names.append(name)
    return names


def _load_patch(patches_dir: Path, name: str) -> Patch:
    path = patches_dir / name
    if not path.is_file():
        raise SeriesError(f"series lists {name} but {path} does not exist")
    data = path.read_bytes()
    changes = parse_file_changes(data.decode("utf-8"), name)
    if not changes:
        raise SeriesError(f"patch {name} touches no file (not a unified diff?)")
    return Patch(name, path, data, changes)


def parse_file_changes(text: str, patch_name: str) -> tuple[FileChange, ...]:
    """The files a unified diff touches.

    Hunk bodies are skipped by their line counts, so a removed line that
    happens to start with "-- " is not mistaken for a file header.
    """
    lines = text.splitlines()
    changes: list[FileChange] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if (
            line.startswith("--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("+++ ")
        ):
            changes.append(_file_change(line[4:], lines[i + 1][4:], patch_name))
            i += 2
        elif header := _HUNK_HEADER.match(line):
            i = _skip_hunk(lines, i + 1, header, patch_name)
        else:
            i += 1  # DEP-3 header, "diff --git", "index ..." and the like
    return tuple(changes)


def _skip_hunk(lines: list[str], i: int, header: re.Match, patch_name: str) -> int:
    old_left = int(header.group(1) or 1)
    new_left = int(header.group(2) or 1)
    while (old_left > 0 or new_left > 0) and i < len(lines):
        tag = lines[i][:1]
        if tag in (" ", ""):  # context; editors may strip a blank context line to ""
            old_left, new_left = old_left - 1, new_left - 1
        elif tag == "-":
            old_left -= 1
        elif tag == "+":
            new_left -= 1
        elif tag != "\\":  # "\ No newline at end of file"
            raise SeriesError(f"patch {patch_name}: malformed hunk at line {i + 1}")
        i += 1
    if old_left > 0 or new_left > 0:
        raise SeriesError(f"patch {patch_name}: truncated hunk at end of file")
    return i


def _file_change(old_field: str, new_field: str, patch_name: str) -> FileChange:
    old = _strip_prefix(old_field, patch_name)
    new = _strip_prefix(new_field, patch_name)
    if old is None and new is None:
        raise SeriesError(
            f"patch {patch_name}: a file section goes /dev/null -> /dev/null"
        )
    if old is not None and new is not None and old != new:
        raise SeriesError(
            f"patch {patch_name}: renames are not supported ({old} -> {new})"
        )
    path = new or old
    assert path is not None  # /dev/null on both sides was refused above
    return FileChange(path=path, creates=old is None, deletes=new is None)


def _strip_prefix(field: str, patch_name: str) -> str | None:
    """'a/torch/x.py<TAB>date' -> 'torch/x.py' (the -p1 we apply with)."""
    name = field.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    parts = name.split("/")[1:]
    if not parts or parts[0] != "torch" or ".." in parts or "" in parts:
        raise SeriesError(
            f"patch {patch_name}: path {name!r} is not a/torch/... "
            "(patches apply with -p1 from the directory that contains torch/)"
        )
    return "/".join(parts)


def load_manifest(path: Path) -> dict[str, str]:
    if not path.is_file():
        raise SeriesError(f"no pinned upstream hashes at {path}")
    manifest: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2 or not re.fullmatch(r"[0-9a-f]{64}", fields[0]):
            raise SeriesError(f"{path}:{lineno}: expected '<sha256>  torch/...'")
        manifest[fields[1]] = fields[0]
    return manifest


def load_overlay_files(overlay_dir: Path = DEFAULT_OVERLAY_DIR) -> dict[str, bytes]:
    """Our new modules, keyed by their path in the target (torch/...)."""
    overlay_dir = Path(overlay_dir)
    if not overlay_dir.is_dir():
        return {}
    files: dict[str, bytes] = {}
    for path in sorted(overlay_dir.rglob("*")):
        rel = path.relative_to(overlay_dir)
        if not path.is_file() or _is_ignored_overlay_entry(rel):
            continue
        if rel.parts[0] != "torch":
            raise SeriesError(f"overlay file {path} is not under overlay/torch/")
        files[rel.as_posix()] = path.read_bytes()
    return files


def _is_ignored_overlay_entry(rel: Path) -> bool:
    # Byte code and dot files (.gitkeep, editor swap files) are not modules.
    return (
        "__pycache__" in rel.parts
        or rel.suffix == ".pyc"
        or any(part.startswith(".") for part in rel.parts)
    )


def version_label(series: Series, overlay_files: dict[str, bytes]) -> str:
    """The local version label of a wheel with this overlay: 'fusion.14.h1a2b3c4d'.

    The patch count, then 'h' and the first 8 hex digits of `fingerprint`
    (patch order and contents, overlay modules), so any change to what apply
    installs changes the label.  The 'h' keeps the segment alphanumeric: PEP 440
    would strip the leading zeros of an all-digit one.
    """
    return f"fusion.{len(series.patches)}.h{fingerprint(series, overlay_files)[:8]}"


def fingerprint(series: Series, overlay_files: dict[str, bytes]) -> str:
    """One hash of all that apply installs: patch order + contents, and overlay."""
    digest = hashlib.sha256()
    for patch in series.patches:
        digest.update(f"patch {patch.name} {patch.sha256}\n".encode())
    for path, data in sorted(overlay_files.items()):
        digest.update(f"overlay {path} {sha256_bytes(data)}\n".encode())
    return digest.hexdigest()

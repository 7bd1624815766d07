"""A torch wheel with the overlay applied, made from an official torch wheel.

    python -m tools.wheel SOURCE [--out DIR]

SOURCE is a torch wheel of a supported release (2.13.0, 2.14.1, 2.15.0; the
series is that release's), or a directory holding exactly one (what
`pip download torch==2.14.1 --no-deps -d DIR` leaves).  The wheel is unpacked
to a temporary directory, the overlay is applied there with the overlay tool
(pinned upstream hashes, staged and atomic, backups and state.json in
torch/.fusion_overlay/ as on any other target), and the version becomes
<release>+<upstream label>.fusion.<patches>.h<hash> (`version_label`) in
torch/version.py, METADATA and the names of the .dist-info directory and the
wheel.  RECORD is rewritten: new hashes and sizes for every changed or added
file.  Members that did not change are copied compressed, byte for byte, so
building takes seconds and the same source and series give the same wheel.
"""

from __future__ import annotations

import argparse
import base64
import copy
import csv
import hashlib
import io
import os
import re
import struct
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from fusion_overlay.overlay import Overlay, OverlayError, apply, load_overlay
from fusion_overlay.patchset import (
    REPO_ROOT,
    SeriesError,
    default_release,
    patches_dir_for,
    release_of,
)
from fusion_overlay.target import (
    Target,
    TargetError,
    check_version,
    fusion_label,
    resolve_target,
)

DEFAULT_OUT_DIR = REPO_ROOT / "build" / "wheel"
_WHEEL_NAME = re.compile(r"^torch-(?P<version>[^-]+)-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl$")
_VERSION_PY = re.compile(r"^(__version__\s*=\s*)(['\"])([^'\"]+)\2", re.M)
REGULAR_FILE_MODE = 0o100644
# A zip local file header: signature, then 26 bytes whose last 4 are the
# lengths of the name and of the extra field that follow it (APPNOTE 4.3.7).
LOCAL_HEADER_MAGIC = b"PK\x03\x04"
LOCAL_HEADER_SIZE = 30


class WheelError(Exception):
    """The source is not a torch wheel the overlay can go into; nothing was written."""


@dataclass(frozen=True)
class SourceWheel:
    path: Path
    version: str  # "2.13.0+cpu"
    tags: str  # "cp311-cp311-manylinux_2_28_x86_64"

    @property
    def dist_info(self) -> str:
        return f"torch-{self.version}.dist-info"


def find_source(path: Path) -> Path:
    """`path` itself, or the one torch wheel in the directory `path`."""
    if path.is_dir():
        wheels = sorted(path.glob("torch-*.whl"))
        if len(wheels) != 1:
            found = ", ".join(w.name for w in wheels) or "none"
            raise WheelError(
                f"{path} should hold exactly one torch wheel, found {found}; "
                f"fill it with `pip download torch=={default_release()} --no-deps "
                f"-d {path}`"
            )
        return wheels[0]
    if not path.is_file():
        raise WheelError(
            f"no such wheel: {path} (get one with `pip download "
            f"torch=={default_release()} --no-deps`)"
        )
    return path


def inspect_source(path: Path) -> SourceWheel:
    """Check that `path` is an official torch wheel of a supported release,
    without unpacking it."""
    match = _WHEEL_NAME.match(path.name)
    if match is None:
        raise WheelError(
            f"{path.name} is not named like a torch wheel "
            "(torch-VERSION-PYTHON-ABI-PLATFORM.whl)"
        )
    source = SourceWheel(path, match["version"], match["tags"])
    check_version(Target(path, "wheel", source.version, path.name))
    if fusion_label(source.version):
        raise WheelError(
            f"{path.name} already has the overlay; start from the official wheel"
        )
    if not zipfile.is_zipfile(path):
        raise WheelError(f"{path} is not a wheel: not a zip archive")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        for member in ("METADATA", "WHEEL", "RECORD"):
            if f"{source.dist_info}/{member}" not in names:
                raise WheelError(f"{path.name} has no {source.dist_info}/{member}")
        if "torch/version.py" not in names:
            raise WheelError(f"{path.name} has no torch/version.py")
        metadata = zf.read(f"{source.dist_info}/METADATA").decode()
    if metadata_field(metadata, "Name") != "torch":
        raise WheelError(f"{path.name}: METADATA does not name torch")
    if metadata_field(metadata, "Version") != source.version:
        raise WheelError(
            f"{path.name}: METADATA says version {metadata_field(metadata, 'Version')}"
        )
    return source


def metadata_field(metadata: str, name: str) -> str | None:
    headers = metadata.split("\n\n", 1)[0]
    match = re.search(rf"^{name}: (.*)$", headers, re.M)
    return match.group(1).strip() if match else None


def torch_version_of(path: Path) -> str:
    """torch.__version__ as the wheel at ``path`` sets it in torch/version.py."""
    with zipfile.ZipFile(path) as zf:
        found = _VERSION_PY.search(zf.read("torch/version.py").decode())
    if found is None:
        raise WheelError(f"{path.name}: torch/version.py sets no __version__")
    return found[3]


def overlay_version(version: str, label: str) -> str:
    """'2.13.0+cpu' -> '2.13.0+cpu.fusion.14.h1a2b3c4d'; keeps upstream's label."""
    return f"{version}.{label}" if "+" in version else f"{version}+{label}"


# --------------------------------------------------------------------------
# Edits to the unpacked tree


def set_version_py(root: Path, old: str, label: str) -> None:
    """torch.__version__ gains the overlay's label.  PyPI's CUDA wheels name
    no local label in the file name ("2.15.0") where version.py has one
    ("2.15.0+cu132"): that label is kept too."""
    path = root / "torch" / "version.py"
    text = path.read_text()
    found = [v for _, _, v in _VERSION_PY.findall(text)]
    if len(found) != 1 or not (
        found[0] == old or ("+" not in old and found[0].startswith(old + "+"))
    ):
        raise WheelError(f"torch/version.py: expected one __version__ = '{old}'")
    new = overlay_version(found[0], label)
    path.write_text(_VERSION_PY.sub(lambda m: f"{m[1]}{m[2]}{new}{m[2]}", text))


def set_metadata_version(metadata: bytes, new: str) -> bytes:
    headers, sep, body = metadata.decode().partition("\n\n")
    headers, count = re.subn(r"^Version: .*$", f"Version: {new}", headers, flags=re.M)
    if count != 1:
        raise WheelError("METADATA: expected one Version header")
    return (headers + sep + body).encode()


# --------------------------------------------------------------------------
# RECORD


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def read_record(data: bytes) -> dict[str, tuple[str, str]]:
    rows = csv.reader(io.StringIO(data.decode()))
    return {row[0]: (row[1], row[2]) for row in rows if row}


def write_record(rows: list[tuple[str, str, str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def check_record(path: Path) -> list[str]:
    """Members whose hash or size disagrees with RECORD, or that it omits."""
    with zipfile.ZipFile(path) as zf:
        records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            return [f"{len(records)} RECORD files"]
        rows = read_record(zf.read(records[0]))
        bad = [name for name in rows if name not in zf.NameToInfo]
        for info in zf.infolist():
            if info.is_dir() or info.filename == records[0]:
                continue
            data = zf.read(info)
            row = rows.get(info.filename)
            if row != (record_hash(data), str(len(data))):
                bad.append(info.filename)
    return bad


# --------------------------------------------------------------------------
# Writing the archive


def copy_member_raw(src: zipfile.ZipFile, info: zipfile.ZipInfo, out: zipfile.ZipFile):
    """Append `info`'s compressed bytes to `out` unchanged.

    zipfile has no public way to do this; it mirrors ZipFile.mkdir, the one
    place zipfile writes an entry without compressing data.  Recompressing the
    700 MB of libraries instead takes half a minute.
    """
    assert src.fp is not None and out.fp is not None
    src.fp.seek(info.header_offset)
    header = src.fp.read(LOCAL_HEADER_SIZE)
    if header[:4] != LOCAL_HEADER_MAGIC:
        raise WheelError(f"{src.filename}: bad local header for {info.filename}")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    src.fp.seek(info.header_offset + LOCAL_HEADER_SIZE + name_len + extra_len)
    raw = src.fp.read(info.compress_size)
    entry = copy.copy(info)
    entry.flag_bits &= ~0x08  # CRC and sizes go in the header: no data descriptor
    out.fp.seek(out.start_dir)
    entry.header_offset = out.fp.tell()
    out._writecheck(entry)  # type: ignore[attr-defined]
    out._didModify = True  # type: ignore[attr-defined]
    out.filelist.append(entry)
    out.NameToInfo[entry.filename] = entry
    out.fp.write(entry.FileHeader())
    out.fp.write(raw)
    out.start_dir = out.fp.tell()


def new_member(name: str, like: zipfile.ZipInfo, mode: int | None = None):
    info = zipfile.ZipInfo(name, date_time=like.date_time)
    info.external_attr = like.external_attr if mode is None else mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


@dataclass
class Built:
    path: Path
    version: str
    changed: list[str]
    added: list[str]
    removed: list[str]
    apply_message: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def build(source_path: Path, out_dir: Path, overlay: Overlay | None = None) -> Built:
    """`overlay`: default, the series of the source wheel's release."""
    source = inspect_source(find_source(Path(source_path)))
    if overlay is None:
        overlay = load_overlay(patches_dir_for(release_of(source.version) or ""))
    version = overlay_version(source.version, overlay.label)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"torch-{version}-{source.tags}.whl"
    with (
        tempfile.TemporaryDirectory(prefix="fusion-wheel-", dir=out_dir) as tmp,
        zipfile.ZipFile(source.path) as src,
    ):
        stage = Path(tmp) / "stage"
        src.extractall(stage)
        applied = apply(resolve_target(stage), overlay)
        set_version_py(stage, source.version, overlay.label)
        partial = Path(tmp) / final.name
        built = _repack(src, source, stage, version, partial)
        os.replace(partial, final)
    built.path, built.apply_message = final, applied
    return built


def _repack(
    src: zipfile.ZipFile, source: SourceWheel, stage: Path, version: str, out: Path
) -> Built:
    old_info, new_info = source.dist_info, f"torch-{version}.dist-info"
    old_record = f"{old_info}/RECORD"
    upstream_rows = read_record(src.read(old_record))

    def renamed(name: str) -> str:
        prefix = f"{old_info}/"
        return new_info + "/" + name[len(prefix) :] if name.startswith(prefix) else name

    rows: list[tuple[str, str, str]] = []
    built = Built(out, version, [], [], [], "")
    seen = {old_record}
    metadata_info = src.getinfo(f"{old_info}/METADATA")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            seen.add(info.filename)
            if info.is_dir() or info.filename == old_record:
                continue
            name, path = renamed(info.filename), stage / info.filename
            if not path.is_file():
                built.removed.append(info.filename)
                continue
            data = path.read_bytes()
            if info.filename == f"{old_info}/METADATA":
                data = set_metadata_version(data, version)
            unchanged = len(data) == info.file_size and zlib.crc32(data) == info.CRC
            if unchanged and name == info.filename and name in upstream_rows:
                copy_member_raw(src, info, dst)
                rows.append((name, *upstream_rows[name]))
                continue
            if not unchanged:
                built.changed.append(name)
            dst.writestr(new_member(name, info), data)
            rows.append((name, record_hash(data), str(len(data))))
        for path in sorted(p for p in stage.rglob("*") if p.is_file()):
            rel = path.relative_to(stage).as_posix()
            if rel in seen:
                continue
            data = path.read_bytes()
            dst.writestr(new_member(rel, metadata_info, REGULAR_FILE_MODE), data)
            rows.append((rel, record_hash(data), str(len(data))))
            built.added.append(rel)
        record = f"{new_info}/RECORD"
        rows.append((record, "", ""))
        dst.writestr(new_member(record, metadata_info), write_record(rows))
    return built


# --------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.wheel", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("source", type=Path, help="torch wheel or a dir holding one")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR, help="output dir")
    args = parser.parse_args(argv)
    try:
        built = build(args.source, args.out)
    except (WheelError, OverlayError, TargetError, SeriesError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(built.apply_message)
    changed, added, removed = map(len, (built.changed, built.added, built.removed))
    print(f"version {built.version}: {changed} changed, {added} added, {removed} gone")
    for name in built.changed:
        print(f"  changed {name}")
    print(f"wrote {built.path}\nsha256 {built.sha256}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Apply, revert, verify and inspect the fusion overlay on a torch tree.

    python -m fusion_overlay.overlay apply|revert|status|verify [--target DIR]

The series is the one of the target's torch release (patches/<release>/);
any other release is refused before anything changes.

apply   stages pristine copies of the touched files in a temp dir, runs the
        series over them with `patch`, adds the overlay modules, and only then
        swaps the results into the target, keeping pristine backups and a state
        file in torch/.fusion_overlay/ so that revert is byte-exact.
revert  puts the pristine files back and removes overlay modules and state.
verify  checks the touched upstream files against that series' pins
        (patches/<release>/upstream-sha256.txt).
status  says what is applied where.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fusion_overlay.patchset import (
    DEFAULT_OVERLAY_DIR,
    DEFAULT_PATCHES_DIR,
    MANIFEST_NAME,
    Series,
    SeriesError,
    fingerprint,
    load_overlay_files,
    load_series,
    patches_dir_for,
    sha256_bytes,
    supported_releases,
    version_label,
)
from fusion_overlay.target import (
    Target,
    TargetError,
    check_version,
    fusion_label,
    resolve_target,
)

STATE_DIR = "torch/.fusion_overlay"
STATE_FILE = "state.json"
BACKUP_DIR = "pristine"
STATE_FORMAT = 1


class OverlayError(Exception):
    """apply/revert/verify cannot proceed; the target was left as it was."""


# --------------------------------------------------------------------------
# Files and state on the target


def read_file(root: Path, rel: str) -> bytes | None:
    path = root / rel
    return path.read_bytes() if path.is_file() else None


def state_dir(root: Path) -> Path:
    return root / STATE_DIR


def backup_rel(rel: str) -> str:
    return f"{STATE_DIR}/{BACKUP_DIR}/{rel}"


def read_state(root: Path) -> dict | None:
    path = state_dir(root) / STATE_FILE
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if state.get("format") != STATE_FORMAT:
        raise OverlayError(f"{path}: unknown state format {state.get('format')!r}")
    return state


def classify_tracked_files(root: Path, state: dict) -> dict[str, str]:
    """Each tracked file: 'applied', 'pristine' or 'edited' (neither)."""
    result = {}
    for rel, hashes in state["files"].items():
        actual = sha256_bytes(read_file(root, rel))
        if actual == hashes["applied_sha256"]:
            result[rel] = "applied"
        elif actual == hashes["pristine_sha256"]:
            result[rel] = "pristine"
        else:
            result[rel] = "edited"
    return result


def is_leftover_state(root: Path, state: dict) -> bool:
    """True when every patched file is pristine again, e.g. torch was reinstalled
    over an applied tree. The backups still hold, so apply/revert just redo
    their work from them instead of calling the tree dirty."""
    kinds = classify_tracked_files(root, state)
    patched = [
        rel
        for rel, h in state["files"].items()
        if h["source"] == "patch" and h["applied_sha256"] != h["pristine_sha256"]
    ]
    return bool(patched) and all(kinds[rel] == "pristine" for rel in patched)


def check_not_dirty(root: Path, state: dict) -> None:
    bad = [
        rel
        for rel, kind in classify_tracked_files(root, state).items()
        if kind != "applied"
    ]
    if bad:
        lines = [
            f"  {rel}: expected {state['files'][rel]['applied_sha256']} (as applied), "
            f"found {sha256_bytes(read_file(root, rel))}"
            for rel in bad
        ]
        raise OverlayError(
            "dirty install: files changed since the overlay was applied "
            "(edited by hand?):\n" + "\n".join(lines) + "\n"
            "Move your edits into a patch; `revert --force` discards them."
        )


def pristine_bytes(root: Path, state: dict | None, rel: str) -> bytes | None:
    """The upstream content of `rel`: the backup when the overlay owns it."""
    if state is None or rel not in state["files"]:
        return read_file(root, rel)
    expected = state["files"][rel]["pristine_sha256"]
    if expected is None:
        return None  # the overlay created it; upstream has no such file
    data = read_file(root, backup_rel(rel))
    if sha256_bytes(data) != expected:
        raise OverlayError(
            f"backup of {rel} is damaged: expected {expected}, "
            f"found {sha256_bytes(data)} ({root / backup_rel(rel)})"
        )
    return data


# --------------------------------------------------------------------------
# Checks against the pinned manifest


def check_pristine_against_manifest(
    series: Series, pristine: dict[str, bytes | None]
) -> None:
    created = series.created_paths()
    for rel in series.touched_paths():
        data = pristine[rel]
        if rel in created:
            if data is not None:
                raise OverlayError(
                    f"{rel}: the series creates it, but the target already has one"
                )
            continue
        expected = series.manifest.get(rel)
        if expected is None:
            raise OverlayError(
                f"{rel} is touched by the series but has no pinned hash in "
                f"patches/{series.release}/{MANIFEST_NAME}; add `sha256sum {rel}` "
                f"of a pristine torch {series.release}"
            )
        if data is None:
            raise OverlayError(
                f"{rel}: missing from the target (expected sha256 {expected})"
            )
        actual = sha256_bytes(data)
        if actual != expected:
            raise OverlayError(
                f"{rel} is not the pristine torch {series.release} file:\n"
                f"  expected sha256 {expected}\n  actual   sha256 {actual}"
            )


def check_overlay_paths_free(
    series: Series, overlay: dict[str, bytes], pristine: dict
) -> None:
    touched = set(series.touched_paths())
    for rel in overlay:
        if rel in touched:
            raise OverlayError(
                f"{rel} is both an overlay module and patched by the series"
            )
        if pristine[rel] is not None:
            raise OverlayError(f"overlay module {rel} would overwrite an upstream file")


# --------------------------------------------------------------------------
# Staging: run the series over pristine copies, away from the target


def stage_series(
    series: Series, pristine: dict[str, bytes | None]
) -> dict[str, bytes | None]:
    """Patched content of every file the series touches (None = deleted)."""
    if shutil.which("patch") is None:
        raise OverlayError("GNU patch is needed (apt-get install patch)")
    with tempfile.TemporaryDirectory(prefix="fusion-overlay-stage-") as tmp:
        stage = Path(tmp)
        for rel in series.touched_paths():
            data = pristine[rel]
            if data is not None:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                (stage / rel).write_bytes(data)
        for patch in series.patches:
            run_patch(stage, patch)
        return {rel: read_file(stage, rel) for rel in series.touched_paths()}


def run_patch(stage: Path, patch) -> None:
    # --fuzz=0: the patches are made against pinned files, so any fuzz means
    # the patch is stale. -r -: no .rej files; the failure is reported here.
    cmd = [
        "patch", "-p1", "--batch", "--forward", "--fuzz=0",
        "--no-backup-if-mismatch", "--reject-file=-", "--input", str(patch.path),
    ]  # fmt: skip
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(cmd, cwd=stage, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        failed = failed_files(output)
        where = f" to {', '.join(failed)}" if failed else ""
        raise OverlayError(
            f"patch {patch.name} does not apply{where} (target untouched):\n"
            + "\n".join("  " + line for line in output.splitlines())
        )


def failed_files(patch_output: str) -> list[str]:
    """Files with a failed hunk, from GNU patch's 'patching file X' / 'FAILED' lines."""
    current, failed = None, []
    for line in patch_output.splitlines():
        if line.startswith("patching file "):
            current = line[len("patching file ") :].strip("'\"")
        elif (
            ("FAILED" in line or "Skipping patch" in line)
            and current
            and current not in failed
        ):
            failed.append(current)
    return failed


# --------------------------------------------------------------------------
# Swapping files in, with rollback


@dataclass
class FileTransaction:
    """Writes and removals under `root` that can all be undone together."""

    root: Path
    _saved: dict[str, bytes | None] = field(default_factory=dict)
    _order: list[str] = field(default_factory=list)
    _new_dirs: list[Path] = field(default_factory=list)

    def _remember(self, rel: str) -> None:
        if rel not in self._saved:
            self._saved[rel] = read_file(self.root, rel)
            self._order.append(rel)

    def write(self, rel: str, data: bytes) -> None:
        self._remember(rel)
        self._make_parents(self.root / rel)
        atomic_write(self.root / rel, data)

    def remove(self, rel: str) -> None:
        self._remember(rel)
        (self.root / rel).unlink(missing_ok=True)

    def _make_parents(self, path: Path) -> None:
        missing = []
        parent = path.parent
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for directory in reversed(missing):
            directory.mkdir()
            self._new_dirs.append(directory)

    def touched(self) -> list[str]:
        return list(self._order)

    def rollback(self) -> None:
        for rel in reversed(self._order):
            old = self._saved[rel]
            if old is None:
                (self.root / rel).unlink(missing_ok=True)
            else:
                atomic_write(self.root / rel, old)
        for directory in reversed(self._new_dirs):
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.fusion-overlay-tmp")
    tmp.write_bytes(data)
    if path.exists():
        shutil.copymode(path, tmp)
    else:
        tmp.chmod(0o644)
    os.replace(tmp, path)


def drop_bytecode(root: Path, rels: list[str]) -> None:
    """Python revalidates .pyc by source mtime+size, which a same-second,
    same-size swap could fool; deleting the caches of what we swapped is cheap."""
    for rel in rels:
        source = root / rel
        if source.suffix != ".py":
            continue
        for pyc in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


def run_transaction(root: Path, steps) -> list[str]:
    """Run `steps(tx)`; undo everything it did if it raises."""
    tx = FileTransaction(root)
    try:
        steps(tx)
    except BaseException:
        tx.rollback()
        raise
    finally:
        drop_bytecode(root, tx.touched())
    return tx.touched()


# --------------------------------------------------------------------------
# Commands


@dataclass
class Overlay:
    """What we would install: the series and our new modules."""

    series: Series
    modules: dict[str, bytes]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.series, self.modules)

    @property
    def label(self) -> str:
        return version_label(self.series, self.modules)


def state_label(state: dict) -> str:
    """The version label of what `state` records as applied (cf. version_label)."""
    return f"fusion.{len(state['patches'])}.h{state['fingerprint'][:8]}"


def check_wheel_label(target: Target, state: dict | None) -> None:
    """An overlay wheel's torch.__version__ names the overlay it was built with
    (tools/wheel.py); the installed files must still be that overlay."""
    label = fusion_label(target.version)
    if label is None:
        return
    if state is None:
        raise OverlayError(
            f"{target.version_origin} says torch {target.version}, an overlay wheel, "
            f"but no overlay is applied to {target.root} (reverted?); reinstall the "
            "wheel"
        )
    if state_label(state) != label:
        raise OverlayError(
            f"{target.version_origin} says torch {target.version}, but the overlay "
            f"applied to {target.root} is {state_label(state)} (applied again after "
            "the wheel was installed?); reinstall the wheel"
        )


def load_overlay(
    patches_dir: Path = DEFAULT_PATCHES_DIR, overlay_dir: Path = DEFAULT_OVERLAY_DIR
) -> Overlay:
    return Overlay(load_series(patches_dir), load_overlay_files(overlay_dir))


def overlay_for(
    target: Target,
    patches_dir: Path | None = None,
    overlay_dir: Path = DEFAULT_OVERLAY_DIR,
) -> Overlay:
    """The overlay for the target's torch release: the series `patches_dir`
    names, else the one of the release its version file says, else the one
    whose pins its pristine files match (a tree that names no version)."""
    release = check_version(target)
    if patches_dir is None and release is not None:
        patches_dir = patches_dir_for(release)
    if patches_dir is not None:
        return load_overlay(patches_dir, overlay_dir)
    state = read_state(target.root)
    for candidate in supported_releases():
        series = load_series(patches_dir_for(candidate))
        try:
            pristine = {
                rel: pristine_bytes(target.root, state, rel)
                for rel in series.touched_paths()
            }
            check_pristine_against_manifest(series, pristine)
        except OverlayError:
            continue
        return Overlay(series, load_overlay_files(overlay_dir))
    raise OverlayError(
        f"{target.root} names no torch version and its files are none of the "
        f"pristine releases the overlay supports ({', '.join(supported_releases())})"
    )


def apply(target: Target, overlay: Overlay) -> str:
    check_version(target)
    label = fusion_label(target.version)
    if label is not None and label != overlay.label:
        raise OverlayError(
            f"{target.version_origin} says torch {target.version}: a wheel built "
            f"with overlay {label}; applying {overlay.label} would make "
            "torch.__version__ name the wrong overlay. Install a wheel built from "
            "this series (make wheel), or the stock torch wheel, instead"
        )
    root = target.root
    state = read_state(root)
    if state is not None and not is_leftover_state(root, state):
        check_not_dirty(root, state)
        if state["fingerprint"] == overlay.fingerprint:
            count = len(state["patches"])
            return f"already applied to {root} ({count} patches); nothing to do"

    previously = list(state["files"]) if state else []
    wanted_paths = [*overlay.series.touched_paths(), *overlay.modules]
    all_paths = list(dict.fromkeys([*wanted_paths, *previously]))
    pristine = {rel: pristine_bytes(root, state, rel) for rel in all_paths}
    check_pristine_against_manifest(overlay.series, pristine)
    check_overlay_paths_free(overlay.series, overlay.modules, pristine)

    applied = {**stage_series(overlay.series, pristine), **overlay.modules}
    new_state = make_state(target, overlay, pristine, applied)
    new_state["created_dirs"] = dirs_to_create(root, overlay.modules, state)

    def steps(tx: FileTransaction) -> None:
        # Backups and state go in before the files they describe: if the
        # process dies midway, the state still knows where the pristine copies are.
        for rel in wanted_paths:
            data = pristine[rel]
            if data is not None and read_file(root, backup_rel(rel)) != data:
                tx.write(backup_rel(rel), data)
        for rel in previously:
            if rel not in applied:
                tx.remove(backup_rel(rel))
        tx.write(
            f"{STATE_DIR}/{STATE_FILE}",
            json.dumps(new_state, indent=2).encode() + b"\n",
        )
        for rel in all_paths:
            set_content(tx, rel, applied.get(rel, pristine[rel]))

    run_transaction(root, steps)
    remove_empty_dirs(state_dir(root) / BACKUP_DIR, keep_top=True)
    verb = "re-applied" if state else "applied"
    names = ", ".join(p.name for p in overlay.series.patches) or "no patches"
    return f"{verb} to {root}: {names}; {len(overlay.modules)} overlay module(s)"


def dirs_to_create(
    root: Path, modules: dict[str, bytes], state: dict | None
) -> list[str]:
    """Dirs the overlay modules need that upstream lacks, so revert can remove them."""
    created = set(state.get("created_dirs", [])) if state else set()
    for rel in modules:
        parent = Path(rel).parent
        while parent != Path(".") and (
            parent.as_posix() in created or not (root / parent).exists()
        ):
            created.add(parent.as_posix())
            parent = parent.parent
    return sorted(created)


def set_content(tx: FileTransaction, rel: str, data: bytes | None) -> None:
    if data is None:
        tx.remove(rel)
    elif read_file(tx.root, rel) != data:
        tx.write(rel, data)


def make_state(target: Target, overlay: Overlay, pristine: dict, applied: dict) -> dict:
    files = {
        rel: {
            "source": "overlay" if rel in overlay.modules else "patch",
            "pristine_sha256": sha256_bytes(pristine[rel]),
            "applied_sha256": sha256_bytes(data),
        }
        for rel, data in applied.items()
    }
    return {
        "format": STATE_FORMAT,
        "fingerprint": overlay.fingerprint,
        "torch_version": target.version,
        "target_kind": target.kind,
        "patches": [
            {"name": p.name, "sha256": p.sha256} for p in overlay.series.patches
        ],
        "files": files,
    }


def revert(target: Target, force: bool = False) -> str:
    root = target.root
    state = read_state(root)
    if state is None:
        return f"not applied to {root}; nothing to revert"
    if not force and not is_leftover_state(root, state):
        check_not_dirty(root, state)
    pristine = {rel: pristine_bytes(root, state, rel) for rel in state["files"]}

    def steps(tx: FileTransaction) -> None:
        # Files first, state last: a crash midway leaves a state that
        # `revert --force` can still finish from.
        for rel, data in pristine.items():
            set_content(tx, rel, data)
        for rel in state["files"]:
            if pristine[rel] is not None:
                tx.remove(backup_rel(rel))
        tx.remove(f"{STATE_DIR}/{STATE_FILE}")

    run_transaction(root, steps)
    remove_empty_dirs(state_dir(root))
    for rel in sorted(state.get("created_dirs", []), reverse=True):
        remove_if_only_bytecode(root / rel)
    return f"reverted {root} to pristine torch {target.version or ''}".rstrip()


def verify(target: Target, overlay: Overlay, require_pristine: bool = False) -> str:
    """Upstream files match the pins; on an applied tree the pristine backups are
    checked instead, and the installed files must still be as applied."""
    check_version(target)
    root = target.root
    state = read_state(root)
    if require_pristine and state is not None:
        raise OverlayError(
            f"the overlay is applied to {root}, which should be pristine"
        )
    leftover = state is not None and is_leftover_state(root, state)
    if state is not None and not leftover:
        check_not_dirty(root, state)
    check_wheel_label(target, state)
    tracked = list(state["files"]) if state else []
    paths = list(
        dict.fromkeys([*overlay.series.touched_paths(), *overlay.modules, *tracked])
    )
    pristine = {rel: pristine_bytes(root, state, rel) for rel in paths}
    check_pristine_against_manifest(overlay.series, pristine)
    check_overlay_paths_free(overlay.series, overlay.modules, pristine)
    count = len(overlay.series.touched_paths())
    if state is None:
        return (
            f"ok: not applied; {count} upstream file(s) of {root} match the pinned "
            f"torch {overlay.series.release} hashes"
        )
    if leftover:
        return (
            f"ok: {root} is pristine again but keeps a stale overlay state; "
            "run apply or revert"
        )
    if state["fingerprint"] == overlay.fingerprint:
        freshness = "current"
    elif fusion_label(target.version):
        freshness = f"a wheel of {state_label(state)}; this checkout is {overlay.label}"
    else:
        freshness = "stale: run apply"
    return (
        f"ok: overlay applied to {root} ({freshness}); installed files are as "
        f"applied and the backups of {count} upstream file(s) match the pinned "
        f"torch {overlay.series.release} hashes"
    )


def status(target: Target, overlay: Overlay) -> str:
    root = target.root
    state = read_state(root)
    lines = [
        f"target: {root} ({target.kind})",
        f"torch:  {target.version or 'unknown'}",
    ]
    if state is None:
        lines.append("overlay: not applied")
        return "\n".join(lines)
    kinds = classify_tracked_files(root, state)
    if is_leftover_state(root, state):
        health = (
            "files are pristine again (torch reinstalled?); apply or revert to tidy up"
        )
    elif all(kind == "applied" for kind in kinds.values()):
        health = "clean"
    else:
        health = "DIRTY: " + ", ".join(
            rel for rel, kind in kinds.items() if kind != "applied"
        )
    current = (
        "current"
        if state["fingerprint"] == overlay.fingerprint
        else "stale (series or overlay changed)"
    )
    lines.append(f"overlay: applied, {current}, {health}")
    lines.append(f"label:   {state_label(state)} (this checkout: {overlay.label})")
    lines += [f"  patch  {p['name']}" for p in state["patches"]]
    lines += [
        f"  module {rel}"
        for rel, h in state["files"].items()
        if h["source"] == "overlay"
    ]
    lines += [f"warning: {line}" for line in flag_warnings()]
    return "\n".join(lines)


def flag_warnings(environ=None) -> list[str]:
    """Flags this environment turns on while a flag they require is off."""
    from fusion_overlay.flags import settings_from_env, unmet_requirements

    return unmet_requirements(settings_from_env(environ))


def remove_empty_dirs(top: Path, keep_top: bool = False) -> None:
    if not top.is_dir():
        return
    for directory in sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()
    if not keep_top and not any(top.iterdir()):
        top.rmdir()


def remove_if_only_bytecode(directory: Path) -> None:
    if not directory.is_dir():
        return
    leftovers = [p for p in directory.iterdir() if p.name != "__pycache__"]
    if not leftovers:
        shutil.rmtree(directory)


# --------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fusion_overlay.overlay", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["apply", "revert", "status", "verify"])
    parser.add_argument(
        "--target",
        help="site-packages dir or PyTorch checkout (the dir holding torch/), "
        "or torch/ itself; default: this interpreter's torch",
    )
    parser.add_argument(
        "--patches",
        type=Path,
        default=None,
        help="dir with series; default: patches/<the target's torch release>",
    )
    parser.add_argument(
        "--overlay", type=Path, default=DEFAULT_OVERLAY_DIR, help="dir mirroring torch/"
    )
    parser.add_argument(
        "--force", action="store_true", help="revert: discard hand edits too"
    )
    parser.add_argument(
        "--pristine", action="store_true", help="verify: fail if the overlay is applied"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        target = resolve_target(args.target)
        if args.command == "revert":
            message = revert(target, force=args.force)
        else:
            overlay = overlay_for(target, args.patches, args.overlay)
            if args.command == "verify":
                message = verify(target, overlay, require_pristine=args.pristine)
            else:
                message = {"apply": apply, "status": status}[args.command](
                    target, overlay
                )
    except (OverlayError, TargetError, SeriesError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())

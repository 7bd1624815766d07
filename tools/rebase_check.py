"""Would the series apply to another upstream tree?  Per patch and per hunk.

    python -m tools.rebase_check UPSTREAM_DIR [--fuzz N] [--markdown FILE]

UPSTREAM_DIR holds upstream files at their torch/... paths: a PyTorch checkout
at any commit, or a directory with just the files the series touches (copies
of upstream main's, say).  The tree is never changed: the touched files are
copied to a temporary directory and the patches are applied there, stacked in
series order, each first with --fuzz=0 (what `fusion_overlay.overlay apply` accepts)
and, where that fails, again with --fuzz=N.  Each patch is reported as

    clean          every hunk at its line
    offset         every hunk applies, some at other lines (`apply` would too)
    fuzz           applies only when patch ignores up to N context lines
    conflict       some hunk applies nowhere: the hunk's header and old lines
                   are printed

A conflicting patch's other hunks are kept, so the patches after it are
checked against a tree as close to the rebased one as can be had; what they
report may then follow from the earlier conflict.  Exit status 0 when every
patch is clean or offset, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fusion_overlay.patchset import (
    DEFAULT_PATCHES_DIR,
    Patch,
    Series,
    SeriesError,
    load_series,
)

_RESULT = re.compile(
    r"^Hunk #(?P<n>\d+) (?P<what>succeeded|FAILED) at (?P<line>\d+)"
    r"(?: with fuzz (?P<fuzz>\d+))?(?: \(offset (?P<offset>-?\d+) lines?\))?"
)
_FILE = re.compile(r"^(?:patching|checking) file (?P<path>.+)$")


@dataclass
class HunkResult:
    path: str
    number: int  # 1-based within its file section, as GNU patch counts
    status: str  # "clean", "offset", "fuzz", "conflict"
    line: int
    offset: int = 0
    fuzz: int = 0
    header: str = ""
    old_lines: list[str] = field(default_factory=list)


@dataclass
class PatchResult:
    name: str
    hunks: list[HunkResult]
    missing: list[str]

    @property
    def status(self) -> str:
        if self.missing:
            return "missing file"
        order = ["clean", "offset", "fuzz", "conflict"]
        return max((h.status for h in self.hunks), key=order.index, default="clean")


def hunk_sources(patch: Patch) -> dict[tuple[str, int], tuple[str, list[str]]]:
    """(path, hunk number) -> the hunk's @@ line and its old-side lines."""
    out: dict[tuple[str, int], tuple[str, list[str]]] = {}
    path, number = "", 0
    current: tuple[str, list[str]] | None = None
    for line in patch.data.decode().splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].split("/", 1)[1]
            number, current = 0, None
        elif line.startswith("@@ "):
            number += 1
            current = (line, [])
            out[(path, number)] = current
        elif current is not None and line[:1] in (" ", "-"):
            current[1].append(line)
        elif line.startswith(("diff ", "--- ")):
            current = None
    return out


def run_patch(stage: Path, patch: Patch, fuzz: int, dry_run: bool):
    cmd = [
        "patch", "-p1", "--batch", "--forward", f"--fuzz={fuzz}",
        "--no-backup-if-mismatch", "--reject-file=-", "--input", str(patch.path),
    ]  # fmt: skip
    if dry_run:
        cmd.append("--dry-run")
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(cmd, cwd=stage, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def parse_results(output: str) -> list[HunkResult]:
    """Hunk results from GNU patch's output; a hunk it does not mention applied
    at its own line."""
    results, path = {}, ""
    for line in output.splitlines():
        if match := _FILE.match(line):
            path = match["path"].strip("'\"")
        elif match := _RESULT.match(line):
            fuzz, offset = int(match["fuzz"] or 0), int(match["offset"] or 0)
            if match["what"] == "FAILED":
                status = "conflict"
            else:
                status = "fuzz" if fuzz else "offset" if offset else "clean"
            number = int(match["n"])
            results[(path, number)] = HunkResult(
                path, number, status, int(match["line"]), offset, fuzz
            )
    return list(results.values())


def check_patch(stage: Path, patch: Patch, fuzz: int) -> PatchResult:
    touched = [c.path for c in patch.changes]
    missing = [
        c.path for c in patch.changes if not c.creates and not (stage / c.path).exists()
    ]
    if missing:
        return PatchResult(patch.name, [], missing)
    sources = hunk_sources(patch)
    used = 0
    code, output = run_patch(stage, patch, used, dry_run=True)
    if code != 0:
        used = fuzz
        code, output = run_patch(stage, patch, used, dry_run=True)
    hunks = parse_results(output)
    seen = {(h.path, h.number) for h in hunks}
    for path, number in sources:
        if (path, number) not in seen:
            hunks.append(HunkResult(path, number, "clean", 0))
    for hunk in hunks:
        hunk.header, hunk.old_lines = sources.get((hunk.path, hunk.number), ("", []))
    hunks.sort(key=lambda h: (touched.index(h.path), h.number))
    # Apply for real (failed hunks dropped) so the next patch sees this one.
    run_patch(stage, patch, used, dry_run=False)
    return PatchResult(patch.name, hunks, [])


def check_series(upstream: Path, series: Series, fuzz: int = 2) -> list[PatchResult]:
    if shutil.which("patch") is None:
        raise SeriesError("GNU patch is needed (apt-get install patch)")
    with tempfile.TemporaryDirectory(prefix="fusion-rebase-check-") as tmp:
        stage = Path(tmp)
        for rel in series.touched_paths():
            if (upstream / rel).is_file():
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(upstream / rel, stage / rel)
        return [check_patch(stage, patch, fuzz) for patch in series.patches]


def report(results: list[PatchResult], fuzz: int) -> str:
    lines = ["| patch | result | hunks |", "| --- | --- | --- |"]
    for result in results:
        if result.missing:
            detail = "missing upstream: " + ", ".join(result.missing)
        else:
            detail = (
                ", ".join(
                    f"{h.path.rsplit('/', 1)[-1]} #{h.number}: {describe(h)}"
                    for h in result.hunks
                    if h.status != "clean"
                )
                or "all at their lines"
            )
        lines.append(f"| {result.name} | {result.status} | {detail} |")
    conflicts = [(r, h) for r in results for h in r.hunks if h.status == "conflict"]
    for result, hunk in conflicts:
        lines += [
            "",
            f"{result.name}: {hunk.path} hunk #{hunk.number} applies nowhere, "
            f"not even with fuzz {fuzz}:",
            "",
            f"    {hunk.header}",
        ]
        lines += [f"    {old}" for old in hunk.old_lines]
    return "\n".join(lines) + "\n"


def describe(hunk: HunkResult) -> str:
    if hunk.status == "conflict":
        return "CONFLICT"
    if hunk.status == "fuzz":
        return f"fuzz {hunk.fuzz}, offset {hunk.offset:+d}"
    return f"offset {hunk.offset:+d}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.rebase_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("upstream", type=Path, help="dir holding torch/... files")
    parser.add_argument("--patches", type=Path, default=DEFAULT_PATCHES_DIR)
    parser.add_argument("--fuzz", type=int, default=2, help="second try's --fuzz")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if not (args.upstream / "torch").is_dir():
        print(f"error: {args.upstream} has no torch/ directory", file=sys.stderr)
        return 2
    try:
        results = check_series(args.upstream, load_series(args.patches), args.fuzz)
    except SeriesError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = report(results, args.fuzz)
    print(text, end="")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    ok = all(r.status in ("clean", "offset") for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The series as a git history and back: edit patches with git, not by hand.

    python -m tools.series_repo export DIR [--torch R|all]  # pristine, then patches
    python -m tools.series_repo rebase DIR --onto R2 --pristine-from SITE_PACKAGES
    python -m tools.series_repo import DIR              # patches/<R>/ from DIR

`export` writes the pristine files of torch R (default: the running torch's
release) that R's series touches (hash-checked against
patches/R/upstream-sha256.txt, copied from the repo's venvs or
--pristine-from) as a first commit, then applies each patch with
`patch -p1 --fuzz=0` and commits it with the patch's file name as subject and
its DEP-3 header as body, on the branch `torch-R`.  Change the history with
git (`git rebase -i`: edit, reword, exec), then `import`: each commit's diff
from its parent becomes the patch named by its subject, with its body as
header; `patches/R/series` follows the commits' order.  `--torch all`
exports every release, a branch each (the pristine files come from each
release's venv, .venv-stock-R, or --pristine-from): a change made on one
branch goes to the others with `git cherry-pick`, then each branch is
imported (`git checkout torch-R`, `import`).

`rebase` is how a new upstream release gets its series: it commits release
R2's pristine files (from a site-packages or unpacked wheel whose
torch/version.py says R2) as a new root, and replays the history of HEAD's
release onto it with `git rebase` (three-way merges) on the branch
`torch-R2`.  Where a patch conflicts, git stops: resolve, `git rebase
--continue`, then `import`, which writes patches/R2/ and its pins (the
sha256 of the new root's files).  A patch
whose line count changes moves the hunks of the patches after it, which is
why editing patch files by hand does not scale.  `import` refuses a history
whose first commit is not the export's pristine commit, a subject that is
not a patch file name, and a commit that touches a file outside torch/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import re

from fusion_overlay.overlay import pristine_bytes, read_state
from fusion_overlay.patchset import (
    MANIFEST_NAME,
    PATCHES_ROOT,
    SERIES_NAME,
    default_release,
    load_series,
    patches_dir_for,
    release_of,
    sha256_bytes,
    supported_releases,
)
from fusion_overlay.target import read_torch_version
from tools.pr import default_base_roots, read_pristine_files

HEADER_END = "---\n"
_PRISTINE = re.compile(
    r"pristine torch ([0-9]+\.[0-9]+\.[0-9]+) files the series touches"
)
MANIFEST_HEADER = """\
# sha256 of the upstream files of torch {release} that the patch series may touch,
# as shipped in the wheel and in the v{release} source tree (paths relative to the
# directory that contains torch/). `fusion-overlay verify` checks these.
# Written by `python -m tools.series_repo import` from the history's first commit.
"""


def pristine_subject(release: str) -> str:
    return f"pristine torch {release} files the series touches"


class SeriesRepoError(Exception):
    """The repo is not an export of the series, or a patch does not apply."""


def git(repo: Path, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input,
        capture_output=True,
        text=True,
        env=_git_env(),
    )
    if result.returncode != 0:
        raise SeriesRepoError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _git_env() -> dict[str, str]:
    identity = {"GIT_AUTHOR_NAME": "series", "GIT_AUTHOR_EMAIL": "series@localhost"}
    identity |= {"GIT_COMMITTER_NAME": "series"}
    identity |= {"GIT_COMMITTER_EMAIL": "series@localhost"}
    return {**os.environ, **identity}


def split_patch(text: str) -> tuple[str, str]:
    """(DEP-3 header through its '---' line, the diff)."""
    end = text.find("\n" + HEADER_END)
    if end < 0:
        raise SeriesRepoError("a patch without a '---' line ending its header")
    cut = end + 1 + len(HEADER_END)
    return text[:cut], text[cut:]


def export(
    repo: Path,
    patches_dir: Path | None = None,
    pristine_from: list[Path] | None = None,
    release: str | None = None,
    keep: bool = False,
) -> None:
    """`release` names the pristine commit; default: the series folder's name.
    `keep`: add the branch to the export already in `repo`."""
    if repo.exists() and any(repo.iterdir()) and not keep:
        raise SeriesRepoError(f"{repo} exists and is not empty")
    series = load_series(patches_dir or patches_dir_for(default_release()))
    release = release or series.release
    roots = [*(pristine_from or []), *default_base_roots()]
    pristine = read_pristine_files(series, roots)
    commit_root(repo, f"torch-{release}", pristine, pristine_subject(release))
    for patch in series.patches:
        header, _ = split_patch(patch.data.decode("utf-8"))
        result = subprocess.run(
            ["patch", "-p1", "--fuzz=0", "--quiet", "--no-backup-if-mismatch"],
            cwd=repo,
            input=patch.data,
            capture_output=True,
        )
        if result.returncode != 0:
            out = (result.stdout + result.stderr).decode(errors="replace").strip()
            raise SeriesRepoError(f"{patch.name} does not apply: {out}")
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "--allow-empty", "-F", "-",
            input=f"{patch.name}\n\n{header}")  # fmt: skip


def commit_root(repo: Path, branch: str, files: dict[str, bytes], subject: str) -> str:
    """A root commit of `files` on a new `branch` (a new repo, or an orphan
    branch beside the ones there); its hash."""
    repo.mkdir(parents=True, exist_ok=True)
    if (repo / ".git").is_dir():
        git(repo, "checkout", "--quiet", "--orphan", branch)
        git(repo, "rm", "-r", "--quiet", "--cached", ".")
        for path in repo.iterdir():
            if path.name != ".git":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    else:
        git(repo, "init", "--quiet", "--initial-branch", branch)
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", subject)
    return git(repo, "rev-parse", "HEAD").strip()


def rebase(repo: Path, onto: str, pristine_from: Path) -> bool:
    """Replay HEAD's series onto release `onto`'s pristine files; False when
    git stopped at a conflict (resolve, `git rebase --continue`, import)."""
    old_root, old_release = history_root(repo)
    version, origin = read_torch_version(pristine_from)
    if release_of(version) != onto:
        raise SeriesRepoError(
            f"{pristine_from} holds torch {version} ({origin}), not {onto}"
        )
    if git(repo, "status", "--porcelain").strip():
        raise SeriesRepoError(f"{repo} has uncommitted changes")
    files: dict[str, bytes] = {}
    for rel in git(repo, "ls-tree", "-r", "--name-only", old_root).split():
        data = pristine_bytes(pristine_from, read_state(pristine_from), rel)
        if data is None:
            raise SeriesRepoError(f"torch {onto} under {pristine_from} has no {rel}")
        files[rel] = data
    new_root = commit_root(repo, f"pristine-{onto}", files, pristine_subject(onto))
    git(repo, "branch", "--quiet", "--force", f"torch-{onto}", f"torch-{old_release}")
    result = subprocess.run(
        ["git", "-C", str(repo), "rebase", "--quiet", "--onto", new_root,
         old_root, f"torch-{onto}"],
        capture_output=True, text=True, env=_git_env(),
    )  # fmt: skip
    return result.returncode == 0


def history_root(repo: Path) -> tuple[str, str]:
    """HEAD's pristine commit and the release it holds."""
    commits = git(repo, "rev-list", "--reverse", "HEAD").split()
    match = _PRISTINE.fullmatch(_subject(repo, commits[0])) if commits else None
    if match is None:
        raise SeriesRepoError(f"{repo}: the first commit is not an export's")
    return commits[0], match.group(1)


def write_manifest(repo: Path, root: str, release: str, patches_dir: Path) -> None:
    """Pins of the pristine commit's files, read from git, never typed."""
    lines = [MANIFEST_HEADER.format(release=release)]
    for rel in git(repo, "ls-tree", "-r", "--name-only", root).split():
        blob = subprocess.run(
            ["git", "-C", str(repo), "show", f"{root}:{rel}"],
            capture_output=True, check=True,
        ).stdout  # fmt: skip
        lines.append(f"{sha256_bytes(blob)}  {rel}\n")
    text = "".join(lines)
    manifest = patches_dir / MANIFEST_NAME
    if not manifest.is_file() or manifest.read_text() != text:
        manifest.write_text(text)


def import_(repo: Path, patches_dir: Path | None = None) -> list[str]:
    """patches/<HEAD's release>/ (or `patches_dir`) rewritten from the history."""
    root, release = history_root(repo)
    patches_dir = patches_dir or PATCHES_ROOT / release
    patches_dir.mkdir(parents=True, exist_ok=True)
    commits = git(repo, "rev-list", "--reverse", "HEAD").split()
    patches: dict[str, str] = {}
    for parent, commit in zip(commits, commits[1:]):
        name = _subject(repo, commit)
        if not name.endswith(".patch") or "/" in name or name in patches:
            raise SeriesRepoError(f"commit {commit[:10]}: subject {name!r} is not a "
                                  "new patch file name")  # fmt: skip
        header = git(repo, "log", "-1", "--format=%b", commit).rstrip("\n") + "\n"
        if not header.endswith("\n" + HEADER_END):
            raise SeriesRepoError(f"{name}: the commit body is not a DEP-3 header")
        diff = git(repo, "diff", "--no-color", "--no-renames", "--no-ext-diff",
                   parent, commit)  # fmt: skip
        outside = [
            line for line in diff.splitlines()
            if line.startswith("diff --git ")
            and not line.startswith("diff --git a/torch/")
        ]  # fmt: skip
        if outside:
            raise SeriesRepoError(f"{name}: touches files outside torch/: {outside}")
        patches[name] = header + diff
    if (patches_dir / SERIES_NAME).is_file():
        for old in load_series(patches_dir).patches:
            if old.name not in patches:
                old.path.unlink()
    for name, text in patches.items():
        path = patches_dir / name
        if path.is_file() and same_patch(path.read_text(), text):
            continue  # keep the file: git orders and labels hunks its own way
        path.write_text(text)
    (patches_dir / SERIES_NAME).write_text("".join(f"{n}\n" for n in patches))
    write_manifest(repo, root, release, patches_dir)
    return list(patches)


def same_patch(a: str, b: str) -> bool:
    """Same header and the same changes, whatever the file order, the `index`
    lines and the function names after a hunk's `@@ ... @@`."""
    return split_patch(a)[0] == split_patch(b)[0] and _changes(a) == _changes(b)


def _changes(text: str) -> list[list[str]]:
    sections = split_patch(text)[1].split("\ndiff --git ")
    normalized = []
    for section in sections:
        lines = []
        for line in section.splitlines():
            if line.startswith("index "):
                continue
            if line.startswith("@@ "):
                line = line[: line.index(" @@", 3) + 3]
            lines.append(line.removeprefix("diff --git "))
        normalized.append(lines)
    return sorted(normalized)


def _subject(repo: Path, commit: str) -> str:
    return git(repo, "log", "-1", "--format=%s", commit).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("export", "rebase", "import"))
    parser.add_argument("repo", type=Path)
    parser.add_argument(
        "--torch", help="export: the release, or all (default: this torch's)"
    )
    parser.add_argument("--onto", help="rebase: the new release")
    parser.add_argument(
        "--pristine-from", type=Path, help="site-packages or unpacked wheel of it"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            roots = [args.pristine_from] if args.pristine_from else []
            releases = (
                supported_releases() if args.torch == "all"
                else [args.torch or default_release()]
            )  # fmt: skip
            for i, release in enumerate(releases):
                export(args.repo, patches_dir_for(release), roots, keep=i > 0)
                print(f"exported the torch {release} series to {args.repo}, "
                      f"branch torch-{release}")  # fmt: skip
        elif args.command == "rebase":
            if not (args.onto and args.pristine_from):
                parser.error("rebase needs --onto RELEASE and --pristine-from DIR")
            if rebase(args.repo, args.onto, args.pristine_from):
                print(f"rebased onto torch {args.onto}; now: import {args.repo}")
            else:
                print(f"git stopped at a conflict in {args.repo}: resolve it, "
                      "`git rebase --continue`, then import")  # fmt: skip
                return 1
        else:
            names = import_(args.repo)
            _, release = history_root(args.repo)
            print(f"patches/{release}/ rewritten from {args.repo}: "
                  f"{len(names)} patches")  # fmt: skip
    except SeriesRepoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

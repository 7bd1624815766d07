"""The series as a git history and back: edit patches with git, not by hand.

    python -m tools.series_repo export DIR   # pristine, then a commit per patch
    python -m tools.series_repo import DIR   # patches/ rewritten from DIR's commits

`export` writes the pristine 2.13.0 files the series touches (hash-checked
against patches/upstream-sha256.txt, copied from .venv-stock) as a first
commit, then applies each patch with `patch -p1 --fuzz=0` and commits it with
the patch's file name as subject and its DEP-3 header as body.  Change the
history with git (`git rebase -i`: edit, reword, exec), then `import`: each
commit's diff from its parent becomes the patch named by its subject, with
its body as header; `patches/series` follows the commits' order.  A patch
whose line count changes moves the hunks of the patches after it, which is
why editing patch files by hand does not scale.  `import` refuses a history
whose first commit is not the export's pristine commit, a subject that is
not a patch file name, and a commit that touches a file outside torch/.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from fusion_overlay.patchset import DEFAULT_PATCHES_DIR, SERIES_NAME, load_series
from tools.pr import default_base_roots, read_pristine_files

PRISTINE_SUBJECT = "pristine torch 2.13.0 files the series touches"
HEADER_END = "---\n"


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


def export(repo: Path, patches_dir: Path = DEFAULT_PATCHES_DIR) -> None:
    if repo.exists() and any(repo.iterdir()):
        raise SeriesRepoError(f"{repo} exists and is not empty")
    series = load_series(patches_dir)
    pristine = read_pristine_files(series, default_base_roots())
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "--quiet")
    for rel, data in pristine.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", PRISTINE_SUBJECT)
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


def import_(repo: Path, patches_dir: Path = DEFAULT_PATCHES_DIR) -> list[str]:
    commits = git(repo, "rev-list", "--reverse", "HEAD").split()
    if not commits or _subject(repo, commits[0]) != PRISTINE_SUBJECT:
        raise SeriesRepoError(f"{repo}: the first commit is not the export's")
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
    for old in load_series(patches_dir).patches:
        if old.name not in patches:
            old.path.unlink()
    for name, text in patches.items():
        path = patches_dir / name
        if path.is_file() and same_patch(path.read_text(), text):
            continue  # keep the file: git orders and labels hunks its own way
        path.write_text(text)
    (patches_dir / SERIES_NAME).write_text("".join(f"{n}\n" for n in patches))
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
    parser.add_argument("command", choices=("export", "import"))
    parser.add_argument("repo", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            export(args.repo)
            print(f"exported the series to {args.repo}")
        else:
            names = import_(args.repo)
            print(f"patches/ rewritten from {args.repo}: {len(names)} patches")
    except SeriesRepoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

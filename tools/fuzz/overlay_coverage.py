"""Line coverage of the overlay's code in the installed torch (``--coverage``).

Two views, both on the files the running interpreter's torch holds:

- the overlay's own modules (``source: overlay`` in the overlay state):
  executed statements over all statements;
- the patched hunks: the lines the series added to upstream files, found by
  diffing the pristine backup against the installed file, so the numbers
  hold whatever patches touch a file and in any order.  A hunk counts as
  reached when one of its statements ran.

Workers run under ``coverage run --parallel-mode``; ``report`` combines their
data files from the run directory.
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path


def site_root() -> Path:
    """The directory that holds the interpreter's torch/ (without importing it)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("torch is not installed in this interpreter")
    return Path(next(iter(spec.submodule_search_locations))).parent


def installed_state(root: Path) -> dict:
    """The overlay state of the torch under ``root`` (refused if none)."""
    from fusion_overlay.overlay import read_state

    state = read_state(root)
    if state is None:
        raise RuntimeError(f"the overlay is not applied to {root} (run `make install`)")
    return state


def measured_files() -> dict[str, Path]:
    """Installed path of every file the overlay owns, by its torch/... name."""
    root = site_root()
    return {rel: root / rel for rel in installed_state(root)["files"]}


def added_ranges(root: Path, state: dict, rel: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of the installed file that the patches added."""
    from fusion_overlay.overlay import pristine_bytes

    pristine = (pristine_bytes(root, state, rel) or b"").decode().splitlines()
    installed = (root / rel).read_text().splitlines()
    matcher = difflib.SequenceMatcher(None, pristine, installed, autojunk=False)
    return [
        (j1 + 1, j2)
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in ("insert", "replace") and j2 > j1
    ]


def report(data_dir: Path) -> dict:
    import coverage

    data_dir = Path(data_dir)
    cov = coverage.Coverage(data_file=str(data_dir / ".coverage"), branch=True)
    cov.combine(data_paths=[str(data_dir)])
    cov.save()
    cov.load()
    root = site_root()
    state = installed_state(root)
    modules, hunks = {}, {}
    for rel, info in state["files"].items():
        path = root / rel
        _, statement_lines, _, missing_lines, _ = cov.analysis2(str(path))
        statements, missing = set(statement_lines), set(missing_lines)
        if info["source"] == "overlay":
            modules[rel] = {
                "statements": len(statements),
                "run": len(statements - missing),
                "missing": sorted(missing),
            }
            continue
        file_hunks = []
        for start, end in added_ranges(root, state, rel):
            stmts = {line for line in statements if start <= line <= end}
            if stmts:
                file_hunks.append(
                    {
                        "lines": [start, end],
                        "statements": len(stmts),
                        "run": len(stmts - missing),
                    }
                )
        hunks[rel] = file_hunks
    return {"modules": modules, "hunks": hunks}


def _pct(run: int, total: int) -> str:
    return f"{100.0 * run / total:5.1f}%" if total else "    -"


def format_report(data: dict) -> str:
    lines = [
        "  coverage of the installed overlay code             "
        "statements      run       %"
    ]
    m_total = m_run = 0
    for rel, m in data["modules"].items():
        m_total += m["statements"]
        m_run += m["run"]
        lines.append(
            f"    {rel:<48s} {m['statements']:6d}   {m['run']:6d}  "
            f"{_pct(m['run'], m['statements'])}"
        )
    lines.append(
        f"    {'overlay modules, all':<48s} {m_total:6d}   {m_run:6d}  "
        f"{_pct(m_run, m_total)}"
    )
    lines.append(
        "  patched hunks (lines the patches add)        "
        "hunks reached  stmts      run       %"
    )
    h_total = h_run = h_n = h_reached = 0
    for rel, file_hunks in data["hunks"].items():
        stmts = sum(h["statements"] for h in file_hunks)
        run = sum(h["run"] for h in file_hunks)
        reached = sum(1 for h in file_hunks if h["run"])
        h_total, h_run = h_total + stmts, h_run + run
        h_n, h_reached = h_n + len(file_hunks), h_reached + reached
        lines.append(
            f"    {rel:<40s} {len(file_hunks):5d} {reached:7d}  {stmts:5d}   "
            f"{run:6d}  {_pct(run, stmts)}"
        )
    lines.append(
        f"    {'patched hunks, all':<40s} {h_n:5d} {h_reached:7d}  {h_total:5d}   "
        f"{h_run:6d}  {_pct(h_run, h_total)}"
    )
    return "\n".join(lines)

"""Results pages written from the benchmarks' JSON, so no number is typed by hand.

    python -m tools.results_pages --publish bench [shapes ...]   # after make bench*
    python -m tools.results_pages --check                        # make test

``make bench`` and ``make bench-shapes`` write ``bench/results/<stem>.json``
(not committed).  ``--publish STEM`` copies that run into
``docs/results/data/<stem>-<release>.json`` (committed; the release is the
torch the run recorded) and writes, from it, ``docs/results/<stem>-<release>.md``
(the run's command, machine, date, torch and full table), the README's
results table (between its ``results:bench`` markers, from the newest
release with a bench run) and ``docs/results/bench-releases.md``, the main
suite's figures side by side per release, with what changed between them.
``--check`` renders every page and the README table again from the
committed data and fails where the text differs: a page or a README number
edited by hand, or data published without its pages.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from fusion_overlay.patchset import REPO_ROOT, release_key, release_of
from tools import bench_models
from tools.bench import RESULTS_DIR, markdown_table

PAGES_DIR = REPO_ROOT / "docs" / "results"
DATA_DIR = PAGES_DIR / "data"
README = REPO_ROOT / "README.md"
README_BEGIN = "<!-- results:bench begin (python -m tools.results_pages) -->"
README_END = "<!-- results:bench end -->"
# stem -> (the make target that writes it, what it measures)
PAGES = {
    "bench": ("make bench", "the norm, softmax and fusion workloads"),
    "shapes": ("make bench-shapes", "normalizations over many shapes"),
    "models": ("make bench-models", "random-init models and their operators"),
    "pyhpc": ("make bench-pyhpc", "TorchBench's pyhpc models"),
}
# The README's table: one row per workload of the main suite.
README_COLUMNS = (
    "| workload | nests stock → patched | patched/stock, 1 thread | 2 threads |"
)


class ResultsError(Exception):
    pass


# A figure that moves by more than this between releases is called out.
CHANGED = 0.10


def load(name: str, data_dir: Path | None = None) -> dict:
    """The published run `name` ("bench-2.14.1")."""
    path = (data_dir or DATA_DIR) / f"{name}.json"
    if not path.is_file():
        stem = name.split("-")[0]
        raise ResultsError(f"no {path}: run `{PAGES[stem][0]}`, then --publish {stem}")
    return json.loads(path.read_text())


def run_release(data: dict) -> str:
    """The upstream release of the torch the run recorded."""
    run = data.get("run")
    if not run:
        raise ResultsError("the JSON has no `run` record (written by an older bench)")
    # runs before the record named torch: the header's "torch 2.13.0+cpu, ..."
    header = data.get("header", "")
    recorded = run.get("torch") or (header.split(",")[0].removeprefix("torch ") or None)
    release = release_of(recorded)
    if release is None:
        raise ResultsError("the run records no torch version (an older bench)")
    return release


def published(stem: str, data_dir: Path | None = None) -> list[str]:
    """The releases with a published `stem` run, oldest first."""
    names = [p.stem for p in (data_dir or DATA_DIR).glob(f"{stem}-*.json")]
    releases = [n.removeprefix(f"{stem}-") for n in names]
    return sorted(releases, key=release_key)


def run_line(data: dict) -> str:
    """Command, machine, date and torch of the run, as the bench recorded them."""
    run_release(data)
    run = data["run"]
    return (
        f"Command: `{run['command']}`. Machine: {run['machine']}. "
        f"Date: {run['date']}. Torch: {run.get('torch', run_release(data))}."
    )


def render_table(stem: str, data: dict) -> str:
    """The table the benchmark itself prints, from its JSON."""
    if stem in ("models", "pyhpc"):
        return bench_models.markdown(data).rstrip("\n")
    return markdown_table(data["rows"], data["header"])


def render_page(stem: str, data: dict) -> str:
    target, what = PAGES[stem]
    name = f"{stem}-{run_release(data)}"
    return (
        f"# `{target}` on torch {run_release(data)}: {what}\n\n"
        "Written by `python -m tools.results_pages` from "
        f"[data/{name}.json](data/{name}.json); do not edit by hand.\n\n"
        f"{run_line(data)}\n\n"
        f"{render_table(stem, data)}\n"
    )


def _by_workload(data: dict) -> dict[str, dict[int, dict]]:
    by_workload: dict[str, dict[int, dict]] = {}
    for row in data["rows"]:
        by_workload.setdefault(row["workload"], {})[int(row["threads"])] = row
    return by_workload


def readme_table(data: dict) -> str:
    """The README's table: patched/stock per workload at 1 and 2 threads."""
    by_workload = _by_workload(data)
    page = f"docs/results/bench-{run_release(data)}.md"
    lines = [
        f"`make bench` on torch {run_release(data)} ({data['run']['machine']}, "
        f"{data['run']['date']}; the full table: [{page}]({page}); other "
        "releases: [docs/results/bench-releases.md]"
        "(docs/results/bench-releases.md)); "
        "patched/stock is the median of per-repetition ratios:",
        "",
        README_COLUMNS,
        "| --- | --- | --- | --- |",
    ]
    for workload, rows in by_workload.items():
        first = next(iter(rows.values()))
        ratios = [
            f"{rows[t]['patched_over_stock']:.2f}" if t in rows else "-" for t in (1, 2)
        ]
        lines.append(
            f"| {workload} | {first['stock_nests']} → {first['patched_nests']} | "
            f"{ratios[0]} | {ratios[1]} |"
        )
    return "\n".join(lines)


def with_readme_table(readme: str, table: str) -> str:
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise ResultsError(
            f"README.md lacks the markers {README_BEGIN!r} ... {README_END!r}"
        )
    return readme[: begin + len(README_BEGIN)] + "\n" + table + "\n" + readme[end:]


def releases_page(runs: dict[str, dict]) -> str:
    """The main suite per release: nests, stock/eager and patched/stock at
    1 thread, and a note where a figure moved between consecutive releases."""
    releases = list(runs)
    tables = {r: _by_workload(d) for r, d in runs.items()}
    workloads = list(dict.fromkeys(w for t in tables.values() for w in t))
    head = " | ".join(
        f"{r} nests | {r} stock/eager | {r} patched/stock" for r in releases
    )
    lines = [
        "# `make bench` per release",
        "",
        "Written by `python -m tools.results_pages` from the published "
        "`data/bench-<release>.json`; do not edit by hand. One row per "
        "workload, at 1 thread: the loop nests stock → patched, stock's time "
        "over eager's and patched over stock (medians of per-repetition "
        "ratios, each in its own run). A figure that moved by more than "
        f"{CHANGED:.2f} from the release before, or a nest count that "
        "changed, is named under the table; each run's machine and date are "
        "on its page.",
        "",
        *(f"- {r}: [bench-{r}.md](bench-{r}.md), {runs[r]['run']['machine']}, "
          f"{runs[r]['run']['date']}" for r in releases),  # fmt: skip
        "",
        f"| workload | {head} |",
        "| --- |" + " --- | --- | --- |" * len(releases),
    ]
    notes = []
    for workload in workloads:
        cells, before = [], None
        for release in releases:
            row = tables[release].get(workload, {}).get(1)
            if row is None:
                cells.append("- | - | -")
                continue
            figures = (
                f"{row['stock_nests']} → {row['patched_nests']}",
                row["stock_over_eager"],
                row["patched_over_stock"],
            )
            cells.append(f"{figures[0]} | {figures[1]:.2f} | {figures[2]:.2f}")
            if before is not None:
                notes += _changes(workload, before, (release, figures))
            before = (release, figures)
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    machines = {d["run"]["machine"] for d in runs.values()}
    lines += ["", "## What changed between releases", ""]
    if len(machines) > 1:
        lines += [
            "The runs come from different machines: what follows mixes the "
            "machines' differences (ISA, cache sizes) with the releases'.",
            "",
        ]
    lines += [
        "Each release is one run: a figure's move is a candidate until more "
        "runs on the same machine decide it.",
        "",
    ]
    lines += notes or ["Nothing moved by more than the threshold."]
    return "\n".join(lines) + "\n"


def _changes(workload: str, before: tuple, after: tuple) -> list[str]:
    (old_release, old), (new_release, new) = before, after
    span = f"{old_release} → {new_release}"
    out = []
    if old[0] != new[0]:
        out.append(f"- {workload}, {span}: loop nests {old[0]} became {new[0]}.")
    if abs(new[1] - old[1]) > CHANGED:
        way = "slower" if new[1] > old[1] else "faster"
        out.append(
            f"- {workload}, {span}: stock got {way} against eager "
            f"({old[1]:.2f} → {new[1]:.2f})."
        )
    if abs(new[2] - old[2]) > CHANGED:
        way = "more" if new[2] < old[2] else "less"
        out.append(
            f"- {workload}, {span}: the overlay pays {way} "
            f"(patched/stock {old[2]:.2f} → {new[2]:.2f})."
        )
    return out


def expected_files(data_dir: Path | None = None) -> dict[Path, str]:
    """Every generated file and its text, from the committed data."""
    data_dir = data_dir or DATA_DIR
    out: dict[Path, str] = {}
    for stem in PAGES:
        for release in published(stem, data_dir):
            name = f"{stem}-{release}"
            out[PAGES_DIR / f"{name}.md"] = render_page(stem, load(name, data_dir))
    benched = published("bench", data_dir)
    if benched:
        newest = load(f"bench-{benched[-1]}", data_dir)
        out[README] = with_readme_table(README.read_text(), readme_table(newest))
        runs = {r: load(f"bench-{r}", data_dir) for r in benched}
        out[PAGES_DIR / "bench-releases.md"] = releases_page(runs)
    return out


def publish(stems: list[str], source: Path | None = None) -> list[Path]:
    source = source or RESULTS_DIR
    releases = {}
    for stem in stems:
        src = source / f"{stem}.json"
        if not src.is_file():
            raise ResultsError(f"no {src}: run `{PAGES[stem][0]}` first")
        # refuses a run without its record, or one that names no torch
        releases[stem] = run_release(json.loads(src.read_text()))
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for stem in stems:
        target = DATA_DIR / f"{stem}-{releases[stem]}.json"
        shutil.copyfile(source / f"{stem}.json", target)
    written = []
    for path, text in expected_files().items():
        path.write_text(text)
        written.append(path)
    return written


def check() -> list[str]:
    """The generated files whose text differs from what the data gives."""
    return [
        str(path.relative_to(REPO_ROOT))
        for path, text in expected_files().items()
        if not path.is_file() or path.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publish", nargs="+", choices=sorted(PAGES), default=[])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.publish:
            for path in publish(args.publish):
                print(f"wrote {path.relative_to(REPO_ROOT)}")
        if args.check:
            stale = check()
            if stale:
                print(
                    "error: not what the data gives (run python -m "
                    "tools.results_pages): " + ", ".join(stale),
                    file=sys.stderr,
                )
                return 1
            print("results pages: as the data gives")
    except ResultsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

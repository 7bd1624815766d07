"""Results pages written from the benchmarks' JSON, so no number is typed by hand.

    python -m tools.results_pages --publish bench [shapes ...]   # after make bench*
    python -m tools.results_pages --check                        # make test

``make bench`` and ``make bench-shapes`` write ``bench/results/<stem>.json``
(not committed).  ``--publish STEM`` copies that run into
``docs/results/data/<stem>.json`` (committed) and writes, from it,
``docs/results/<stem>.md`` (the run's command, machine, date and full table)
and the README's results table (between its ``results:bench`` markers).
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

from fusion_overlay.patchset import REPO_ROOT
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
}
# The README's table: one row per workload of the main suite.
README_COLUMNS = (
    "| workload | nests stock → patched | patched/stock, 1 thread | 2 threads |"
)


class ResultsError(Exception):
    pass


def load(stem: str, data_dir: Path | None = None) -> dict:
    path = (data_dir or DATA_DIR) / f"{stem}.json"
    if not path.is_file():
        raise ResultsError(f"no {path}: run `{PAGES[stem][0]}`, then --publish {stem}")
    return json.loads(path.read_text())


def run_line(data: dict) -> str:
    """Command, machine and date of the run, as the bench recorded them."""
    run = data.get("run")
    if not run:
        raise ResultsError("the JSON has no `run` record (written by an older bench)")
    return (
        f"Command: `{run['command']}`. Machine: {run['machine']}. "
        f"Date: {run['date']}."
    )


def render_table(stem: str, data: dict) -> str:
    """The table the benchmark itself prints, from its JSON."""
    if stem == "models":
        return bench_models.markdown(data).rstrip("\n")
    return markdown_table(data["rows"], data["header"])


def render_page(stem: str, data: dict) -> str:
    target, what = PAGES[stem]
    return (
        f"# `{target}`: {what}\n\n"
        "Written by `python -m tools.results_pages` from "
        f"[data/{stem}.json](data/{stem}.json); do not edit by hand.\n\n"
        f"{run_line(data)}\n\n"
        f"{render_table(stem, data)}\n"
    )


def readme_table(data: dict) -> str:
    """The README's table: patched/stock per workload at 1 and 2 threads."""
    by_workload: dict[str, dict[int, dict]] = {}
    for row in data["rows"]:
        by_workload.setdefault(row["workload"], {})[int(row["threads"])] = row
    lines = [
        f"`make bench` ({data['run']['machine']}, {data['run']['date']}; the "
        "full table: [docs/results/bench.md](docs/results/bench.md)); "
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


def expected_files(data_dir: Path | None = None) -> dict[Path, str]:
    """Every generated file and its text, from the committed data."""
    data_dir = data_dir or DATA_DIR
    out: dict[Path, str] = {}
    for stem in PAGES:
        if (data_dir / f"{stem}.json").is_file():
            out[PAGES_DIR / f"{stem}.md"] = render_page(stem, load(stem, data_dir))
    if (data_dir / "bench.json").is_file():
        out[README] = with_readme_table(
            README.read_text(), readme_table(load("bench", data_dir))
        )
    return out


def publish(stems: list[str], source: Path | None = None) -> list[Path]:
    source = source or RESULTS_DIR
    for stem in stems:
        src = source / f"{stem}.json"
        if not src.is_file():
            raise ResultsError(f"no {src}: run `{PAGES[stem][0]}` first")
        run_line(json.loads(src.read_text()))  # refuses a run without its record
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for stem in stems:
        shutil.copyfile(source / f"{stem}.json", DATA_DIR / f"{stem}.json")
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

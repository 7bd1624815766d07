"""tools/results_pages.py: results pages and the README's table come from the
benchmarks' JSON, never from hand edits.  No compiles."""

from __future__ import annotations

import json

import pytest

from tools import results_pages as pages

RUN = {
    "command": "python -m tools.bench --reps 3",
    "machine": "Some CPU, x86_64, avx2, 2 cores",
    "date": "2030-01-02 03:04",
}


def row(workload: str, threads: int, ratio: float) -> dict:
    return {
        "workload": workload, "threads": threads,
        "eager_min_ms": 1.0, "eager_median_ms": 1.1,
        "stock_min_ms": 2.0, "stock_median_ms": 2.1,
        "patched_min_ms": 1.0, "patched_median_ms": 1.2,
        "stock_over_eager": 2.0, "patched_over_eager": 1.0,
        "patched_over_stock": ratio, "stock_nests": 4, "patched_nests": 1,
        "patched_gbs": 10.0, "roofline": 0.5,
        "stock_compile_s": 1.0, "patched_compile_s": 1.1,
    }  # fmt: skip


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A README with the markers, and a fresh bench run to publish."""
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# x\n\n{pages.README_BEGIN}\nold, typed by hand\n{pages.README_END}\n\nrest\n"
    )
    monkeypatch.setattr(pages, "README", readme)
    monkeypatch.setattr(pages, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(pages, "PAGES_DIR", tmp_path / "docs" / "results")
    monkeypatch.setattr(pages, "DATA_DIR", tmp_path / "docs" / "results" / "data")
    source = tmp_path / "bench" / "results"
    source.mkdir(parents=True)
    data = {
        "header": "torch 2.13.0, the header line",
        "rows": [row("layernorm", 1, 0.49), row("layernorm", 2, 0.51)],
        "run": RUN,
    }
    (source / "bench.json").write_text(json.dumps(data))
    return tmp_path, source


def test_publish_writes_the_page_and_the_readme_table(repo):
    root, source = repo
    pages.publish(["bench"], source)
    page = (root / "docs" / "results" / "bench-2.13.0.md").read_text()
    for text in (RUN["command"], RUN["machine"], RUN["date"], "| layernorm | 1 |"):
        assert text in page
    readme = (root / "README.md").read_text()
    assert "| layernorm | 4 → 1 | 0.49 | 0.51 |" in readme
    assert "typed by hand" not in readme and readme.endswith("\n\nrest\n")
    assert pages.check() == []


def test_a_number_edited_by_hand_is_caught(repo):
    root, source = repo
    pages.publish(["bench"], source)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("0.49", "0.39"))
    page = root / "docs" / "results" / "bench-2.13.0.md"
    page.write_text(page.read_text().replace("0.49", "0.39"))
    assert sorted(pages.check()) == ["README.md", "docs/results/bench-2.13.0.md"]
    assert pages.main(["--check"]) == 1


def test_a_run_without_its_record_is_refused(repo):
    root, source = repo
    data = json.loads((source / "bench.json").read_text())
    del data["run"]
    (source / "bench.json").write_text(json.dumps(data))
    with pytest.raises(pages.ResultsError, match="no `run` record"):
        pages.publish(["bench"], source)
    assert not (root / "docs").exists()  # nothing half-published


def test_the_committed_pages_are_what_their_data_gives():
    assert pages.check() == []


def test_each_release_gets_its_page_and_the_releases_page_names_what_moved(repo):
    root, source = repo
    pages.publish(["bench"], source)
    data = json.loads((source / "bench.json").read_text())
    data["run"] = {**RUN, "torch": "2.14.1+cu130"}
    data["rows"] = [row("layernorm", 1, 0.70), row("layernorm", 2, 0.51)]
    data["rows"][0]["stock_nests"] = 3
    (source / "bench.json").write_text(json.dumps(data))
    pages.publish(["bench"], source)
    results = root / "docs" / "results"
    assert (results / "bench-2.13.0.md").is_file()
    assert "Torch: 2.14.1+cu130" in (results / "bench-2.14.1.md").read_text()
    # the README shows the newest release
    assert "on torch 2.14.1" in (root / "README.md").read_text()
    text = (results / "bench-releases.md").read_text()
    assert "| layernorm | 4 → 1 | 2.00 | 0.49 | 3 → 1 | 2.00 | 0.70 |" in text
    assert "layernorm, 2.13.0 → 2.14.1: loop nests 4 → 1 became 3 → 1" in text
    assert "the overlay pays less (patched/stock 0.49 → 0.70)" in text
    assert "stock got" not in text  # stock/eager did not move
    assert pages.check() == []


def test_a_run_that_names_no_torch_is_refused(repo):
    root, source = repo
    data = json.loads((source / "bench.json").read_text())
    data["header"] = "no torch here"
    (source / "bench.json").write_text(json.dumps(data))
    with pytest.raises(pages.ResultsError, match="no torch version"):
        pages.publish(["bench"], source)
    assert not (root / "docs").exists()

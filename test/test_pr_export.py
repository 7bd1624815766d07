"""tools/pr.py: the format-patch export, its `git am` check and --onto.

No compiles: a handful of git commands over a partial v2.13.0 tree made from
the venvs' pristine files.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, read_pristine

from tools import pr
from fusion_overlay.patchset import load_overlay_files, load_series

IDENTITY = ("Test Author", "test@example.com")
DATE = "2025-01-02T03:04:05+00:00"

pytestmark = pytest.mark.skipif(
    not pr.default_base_roots(), reason="no torch 2.13.0 venv (run `make stock-venv`)"
)


def run_git(cwd: Path, *args: str) -> str:
    env = pr.git_env(IDENTITY, DATE)
    return pr.git(cwd, *args, env=env).stdout


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> pr.Export:
    out = tmp_path_factory.mktemp("pr")
    no_bench = out / "no-bench.json"
    return pr.export_series(
        out / "patches",
        identity=IDENTITY,
        date=DATE,
        bench_path=no_bench,
        upstream_test_summary=out / "none.md",
    )


def patch_subjects(patches: list[Path]) -> list[str]:
    subjects = []
    for patch in patches:
        text = patch.read_text()
        match = re.search(r"^Subject: \[PATCH\] (.*(?:\n .*)*)", text, re.M)
        assert match, patch
        subjects.append(match.group(1).replace("\n ", " "))
    return subjects


def files_of(patch: Path) -> list[str]:
    return re.findall(r"^diff --git a/(\S+) b/", patch.read_text(), re.M)


def fresh_base(root: Path, export: pr.Export) -> Path:
    """A partial v2.13.0 tree built here, from conftest's pristine files."""
    root.mkdir()
    run_git(root, "init", "--quiet")
    for rel in export.base_files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(read_pristine(rel))
    run_git(root, "add", ".")
    run_git(root, "commit", "--quiet", "-m", "v2.13.0")
    return root


# --------------------------------------------------------------------------
# The export


def test_one_commit_per_patch_with_dep3_subjects(export):
    series = load_series()
    assert len(export.patches) == len(series.patches)
    for subject, patch in zip(
        patch_subjects(export.patches), series.patches, strict=True
    ):
        summary = pr.parse_dep3(patch).summary
        assert subject.startswith("[inductor]")
        assert subject.endswith(summary.split(": ", 1)[-1]), (subject, summary)


def test_git_am_on_a_fresh_partial_tree(export, tmp_path):
    root = fresh_base(tmp_path / "pytorch", export)
    run_git(root, "am", "--quiet", *map(str, export.patches))
    assert run_git(root, "rev-parse", "HEAD^{tree}").strip() == export.final_tree
    log = run_git(root, "log", "--format=%an <%ae>", f"HEAD~{len(export.patches)}..")
    assert set(log.splitlines()) == {f"{IDENTITY[0]} <{IDENTITY[1]}>"}


def applied(export: pr.Export, root: Path, count: int) -> Path:
    """The partial tree after the first `count` exported commits."""
    if not root.exists():
        fresh_base(root, export)
    run_git(root, "am", "--quiet", *map(str, export.patches[:count]))
    return root


def test_overlay_modules_grow_step_by_step(export, tmp_path):
    overlay = load_overlay_files()
    states: dict[str, list[str]] = {}
    for patch in export.patches:
        for rel in files_of(patch):
            if rel in overlay:
                states.setdefault(rel, []).append(patch.name)
    assert set(states) == set(overlay)
    root = applied(export, tmp_path / "pytorch", len(export.patches))
    for rel, data in overlay.items():
        assert (root / rel).read_bytes() == data  # the last state is the module
    for commit in export.commits:
        for rel in commit.uses:  # named by Origin: or imported by the patch
            first = states[rel][0][:4]
            assert first <= commit.patch.name[:4], (rel, commit.patch.name)
        for rel in commit.modules:
            ast.parse(commit.modules[rel])
    # a module only one patch names lands whole with that patch
    named = {rel: [c for c in export.commits if rel in c.uses] for rel in overlay}
    for rel, commits in named.items():
        if len(commits) == 1 and states[rel] == [commits[0].patch.name]:
            assert commits[0].modules[rel] == overlay[rel].decode()


def test_a_package_init_lands_with_the_first_module_in_its_package(export):
    overlay = load_overlay_files()
    inits = {rel for rel in overlay if rel.endswith("/__init__.py")}
    assert "torch/_inductor/codegen/cpp_fusion/scheduling/__init__.py" in inits
    landed: dict[str, str] = {}
    for commit in export.commits:
        for rel in commit.new_modules:
            landed.setdefault(rel, commit.patch.name[:4])
    for init in inits:
        package = init.removesuffix("__init__.py")
        first = min(landed[rel] for rel in landed if rel.startswith(package))
        assert landed[init] == first, init
    assert landed["torch/_inductor/codegen/cpp_fusion/scheduling/__init__.py"] == "0005"


def test_a_shared_module_grows_by_the_names_each_step_imports(export):
    # cpp_fusion/costs.py: 0004 brings two_step_variance_threshold, 0007
    # expensive_to_recompute; neither is in the module before its patch.
    costs = "torch/_inductor/codegen/cpp_fusion/costs.py"
    by_patch = {c.patch.name[:4]: c for c in export.commits}
    assert "two_step_variance_threshold" in by_patch["0004"].grown[costs]
    assert "expensive_to_recompute" in by_patch["0007"].grown[costs]
    before = [c for c in export.commits if c.patch.name[:4] < "0007"]
    for commit in before:
        assert "def expensive_to_recompute" not in commit.modules.get(costs, "")
        assert "expensive_to_recompute" not in commit.available[costs]


def test_tests_in_upstream_layout_and_self_contained(export, tmp_path):
    root = applied(export, tmp_path / "pytorch", len(export.patches))
    helper = (root / pr.HELPER_PATH).read_text()
    helper_names = pr.top_level_names(helper)
    assert {"compile_and_inspect", "analyze", "SEED_CONFIG"} <= helper_names
    assert "OVERLAY_FLAGS" in helper_names and "pytest" not in helper
    for test in pr.TEST_EXPORTS:
        text = (root / test.dest).read_text()
        tree = ast.parse(text)
        assert not re.search(r"^\s*(from|import)\s+(tools|compile_utils)\b", text, re.M)
        assert not re.search(r"^\s*import pytest", text, re.M)
        assert "from torch._inductor.test_case import run_tests, TestCase" in text
        assert 'if __name__ == "__main__":\n    run_tests()' in text
        classes = [
            n
            for n in tree.body
            if isinstance(n, ast.ClassDef)
            and [ast.unparse(b) for b in n.bases] == ["TestCase"]
        ]
        assert len(classes) == 1, test.dest  # helper classes may sit beside it
        methods = {n.name for n in classes[0].body if isinstance(n, ast.FunctionDef)}
        source = (REPO_ROOT / test.source).read_text()
        wanted = {
            n.name
            for n in ast.parse(source).body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
        }
        assert wanted <= methods, test.dest  # every test of ours, in the end
    assert not re.search(r"^\s*(from|import)\s+tools\b", helper, re.M)


def test_each_commit_carries_the_tests_it_places(export, tmp_path):
    """A test arrives once, with the commit that places it, and stays."""
    root = tmp_path / "pytorch"
    fresh_base(root, export)
    seen: dict[str, set[str]] = {}
    for index, commit in enumerate(export.commits):
        run_git(root, "am", "--quiet", str(export.patches[index]))
        for dest, names in commit.test_files.items():
            text = (root / dest).read_text()
            for name in names:
                assert f"def {name}(self" in text
                assert name not in seen.get(dest, set())
            seen.setdefault(dest, set()).update(names)
        for dest, names in seen.items():
            text = (root / dest).read_text()
            assert all(f"def {n}(self" in text for n in names)


def test_exported_tests_run_against_the_helper(export, tmp_path):
    """Import the exported files (no compile): the helper's names resolve."""
    root = fresh_base(tmp_path / "pytorch", export)
    run_git(root, "am", "--quiet", *map(str, export.patches))
    code = (
        "import sys; sys.path.insert(0, 'test/inductor'); import cpp_loop_nests as h; "
        "print(h.count_nests(sys.stdin.read()))"
    )
    loop = "    for(;;)\n    {\n    }\n"
    kernel = 'extern "C" void kernel()\n{\n' + loop + loop + "}\n"

    python = REPO_ROOT / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv")
    proc = subprocess.run(
        [str(python), "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        input=kernel,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2"


def test_without_upstream_files_the_commits_only_name_their_edits(export):
    # the export fixture has no upstream test files (test_upstream_test_edits.py
    # exports with them)
    edited = {f for c in export.commits for e in c.upstream_edits for f in e.files}
    assert edited  # the series edits upstream tests
    for commit, patch in zip(export.commits, export.patches, strict=True):
        assert not edited & set(files_of(patch))
        if commit.upstream_edits:
            assert "not in this export" in patch.read_text()
    assert any("not in this export" in c for c in export.checks)


def test_pr_description(export):
    text = (export.out_dir / pr.PR_DESCRIPTION).read_text()
    for commit in export.commits:
        assert pr.commit_subject(commit.dep3.summary) in text
    assert "No bench/results/bench.json" in text
    assert "`git am` of the" in text and export.final_tree[:12] in text
    # the rebase report (docs/rebase-status.md), subsections included, before
    # the checks
    rebase = pr.docs_page_body(pr.REBASE_STATUS_PAGE)
    assert rebase and "pytorch#185855" in rebase and "### Upstream main" in rebase
    assert text.index(rebase) < text.index("## Checks")
    # the upstream tests the series changes, each with its patch and reason
    from tools.upstream_expectations import EXPECTED_CHANGES

    for test_id, change in EXPECTED_CHANGES.items():
        assert f"- `{test_id}` ({change.patch}, {change.kind}): {change.reason}" in text


# --------------------------------------------------------------------------
# Messages: DEP-3 + bench.json


def fake_bench(path: Path) -> Path:
    row = dict(
        eager_median_ms=2.0, stock_median_ms=3.8, patched_median_ms=1.9,
        patched_over_stock=0.5, stock_nests=4, patched_nests=1,
    )  # fmt: skip
    rows = [
        {**row, "workload": name, "threads": 1}
        for name in ("layernorm", "groupnorm", "rmsnorm", "bias_gelu_layernorm")
    ]
    path.write_text(json.dumps({"header": "torch 2.13.0, test header", "rows": rows}))
    return path


def test_commit_message_has_description_and_named_workloads(tmp_path):
    bench = pr.load_bench(fake_bench(tmp_path / "bench.json"))
    assert bench is not None
    commits = pr.plan_commits(load_series(), load_overlay_files())
    retile = next(c for c in commits if "LayerNorm" in c.dep3.body)
    message = pr.commit_message(retile, bench)
    assert message.startswith(pr.commit_subject(retile.dep3.summary) + "\n\n")
    assert retile.dep3.body.splitlines()[0] in message
    assert "test header" in message
    assert "| layernorm | 1 |" in message and "| bias_gelu_layernorm |" in message
    assert "rmsnorm" not in message  # the description does not name it
    quiet = next(
        c for c in commits if not pr.bench_rows_for(c.dep3.summary + c.dep3.body, bench)
    )
    assert "Measured" not in pr.commit_message(quiet, bench)


def test_missing_or_broken_bench_is_skipped(tmp_path):
    assert pr.load_bench(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text('{"rows": [{"nope": 1}]}')
    assert pr.load_bench(tmp_path / "bad.json") is None


def test_dep3_parsing():
    patch = load_series().patches[0]
    dep3 = pr.parse_dep3(patch)
    assert dep3.summary and "\n" not in dep3.summary
    assert dep3.fields["Forwarded"] == "not-yet"
    assert pr.commit_subject("cpp: do x") == "[inductor][cpp] do x"
    assert pr.commit_subject("lowering: y") == "[inductor] lowering: y"


def test_an_overlay_module_no_patch_names_is_refused(tmp_path):
    overlay = dict(load_overlay_files())
    overlay["torch/_inductor/orphan.py"] = b"x = 1\n"
    with pytest.raises(pr.ExportError, match="orphan.py"):
        pr.plan_commits(load_series(), overlay)


RETILE = "torch/_inductor/codegen/cpp_fusion/outer_loop/retile.py"


def test_a_forward_import_between_steps_is_refused():
    # 0002's module using 0009's predicate: step 0002 would need 0009's module
    overlay = dict(load_overlay_files())
    text = overlay[RETILE].decode()
    text = text.replace(
        "from torch._inductor.virtualized import V\n",
        "from torch._inductor.virtualized import V\n"
        "from ..scheduling.block_fusion import is_outer_block_fusion\n",
    ).replace(
        "        balanced = balances_over_threads(outer)\n",
        "        balanced = balances_over_threads(outer)\n"
        "        if is_outer_block_fusion(self.node):\n"
        "            return balanced\n",
    )
    assert "is_outer_block_fusion(self.node)" in text
    overlay[RETILE] = text.encode()
    with pytest.raises(
        pr.LayeringError,
        match=r"0002-\S+: forward import(?s:.*)`is_outer_block_fusion` of "
        r"`torch/_inductor/codegen/cpp_fusion/scheduling/block_fusion.py` is needed by "
        r"codegen/cpp_fusion/outer_loop/retile.py:OuterLoopRetile, but 0009-",
    ):
        pr.plan_commits(load_series(), overlay)


def test_the_cost_model_grows_with_the_features_that_use_it():
    # cpp_fusion/costs.py is 0002's (Origin:) and a leaf; each threshold
    # arrives with the first step whose module uses it, not all at once with
    # the last patch that names the module (0007)
    commits = {c.patch.name[:4]: c for c in pr.plan_commits(*_series_and_overlay())}
    costs = "torch/_inductor/codegen/cpp_fusion/costs.py"
    arrivals = {
        "INNER_TO_OUTER": "0002",
        "SMALL_CONSUMER_RATIO": "0003",
        "ACCUMULATORS": "0008",
        "BLOCK_BYTES_IN_CACHE": "0009",
        # a row longer than L2 stays in the last-level cache (0002's guard)
        "last_level_cache_bytes": "0002",
        "ROW_SHARE_OF_LAST_LEVEL": "0002",
        "LOOKAHEAD_BYTES": "0014",
        "TILE_BYTES_IN_CACHE": "0019",
    }
    _assert_arrivals(commits, costs, arrivals)


def test_each_fallback_lands_with_the_patch_that_lists_it():
    # cpp_fusion/outer_loop/fallbacks.py is 0002's; each patch that adds an entry
    # to CppScheduling.outer_loop_fallbacks() brings its fallback object
    commits = {c.patch.name[:4]: c for c in pr.plan_commits(*_series_and_overlay())}
    fallbacks = "torch/_inductor/codegen/cpp_fusion/outer_loop/fallbacks.py"
    arrivals = {
        "Retile": "0002",
        "FailedMerge": "0002",
        "Regroup": "0012",
        "Shallower": "0018",
        "Prepend": "0020",
    }
    _assert_arrivals(commits, fallbacks, arrivals)


def _assert_arrivals(commits, module: str, arrivals: dict[str, str]) -> None:
    """Each name of the module lands with its step, and not before."""
    for name, step in arrivals.items():
        assert name in commits[step].grown[module], (name, step)
        earlier = [c for n, c in commits.items() if n < step]
        assert all(name not in c.available[module] for c in earlier), name


def _series_and_overlay():
    return load_series(), load_overlay_files()


def test_imports_resolve_relative_to_the_patched_file():
    lines = [
        "from .cpp_fusion.outer_loop.retile import X",
        "    from ..scheduler import Y",
        "from . import config",
    ]
    found = pr.imported_paths("torch/_inductor/codegen/cpp.py", lines)
    assert "torch/_inductor/codegen/cpp_fusion/outer_loop/retile.py" in found
    assert "torch/_inductor/scheduler.py" in found
    assert "torch/_inductor/codegen/config.py" in found


# --------------------------------------------------------------------------
# --pytorch-src / --onto, on a fake checkout


def first_hunk(patch_text: str, file: str) -> list[str]:
    section = patch_text.split(f"+++ b/{file}\n", 1)[1]
    hunk = section.split("\n@@", 2)[0].split("\n", 1)[1]
    return hunk.splitlines()


def pick_target(export: pr.Export) -> tuple[int, str, list[str]]:
    """A patch, a file of it and its first hunk with 3 leading context lines."""
    for i, patch in enumerate(export.patches):
        text = patch.read_text()
        for rel in files_of(patch):
            if rel not in export.base_files:
                continue
            hunk = first_hunk(text, rel)
            if len(hunk) > 4 and all(h.startswith(" ") and h.strip() for h in hunk[:3]):
                return i, rel, hunk
    pytest.skip("no hunk with three non-blank leading context lines")


@pytest.fixture
def fake_checkout(export, tmp_path) -> Path:
    root = fresh_base(tmp_path / "pytorch", export)
    (root / "setup.py").write_text("")
    (root / "version.txt").write_text("2.13.0\n")
    run_git(root, "add", ".")
    run_git(root, "commit", "--quiet", "-m", "layout")
    run_git(root, "tag", "v2.13.0")
    return root


def upstream_edit(root: Path, rel: str, old_line: str, message: str) -> None:
    text = (root / rel).read_text()
    assert text.count(old_line + "\n") >= 1
    (root / rel).write_text(
        text.replace(old_line + "\n", old_line + "  # upstream\n", 1)
    )
    run_git(root, "commit", "--quiet", "-am", message)


def repo_state(root: Path) -> tuple[str, str, str]:
    return (
        run_git(root, "rev-parse", "HEAD"),
        run_git(root, "status", "--porcelain"),
        run_git(root, "for-each-ref"),
    )


def test_onto_reports_a_conflict_per_patch(export, fake_checkout, tmp_path):
    index, rel, hunk = pick_target(export)
    first_change = next(i for i, h in enumerate(hunk) if h[:1] in "+-")
    upstream_edit(
        fake_checkout, rel, hunk[first_change - 1][1:], "touch a patched line"
    )
    before = repo_state(fake_checkout)
    env = pr.git_env(IDENTITY, DATE)

    label, results = pr.apply_onto(
        fake_checkout, "HEAD", export, env, tmp_path / "onto"
    )
    assert "v2.13.0-1-" in label
    assert [r.patch for r in results] == [p.name for p in export.patches]
    assert results[index].status == "conflict" and rel in results[index].files
    assert all(r.status == "clean" for r in results[:index])
    assert not list((tmp_path / "onto").glob("*.patch"))  # no rebased set
    assert repo_state(fake_checkout) == before  # the checkout is only read

    label, results = pr.apply_onto(
        fake_checkout, "v2.13.0", export, env, tmp_path / "onto"
    )
    assert all(r.status == "clean" for r in results)
    assert len(list((tmp_path / "onto").glob("*.patch"))) == len(export.patches)
    report = pr.format_results(label, results)
    assert f"{len(results)} of {len(results)} apply" in report


def test_onto_merges_a_nearby_upstream_change_in_three_ways(
    export, fake_checkout, tmp_path
):
    index, rel, hunk = pick_target(export)
    upstream_edit(fake_checkout, rel, hunk[0][1:], "touch a context line")
    env = pr.git_env(IDENTITY, DATE)
    _, results = pr.apply_onto(fake_checkout, "HEAD", export, env, None)
    assert results[index].status == "3-way merged", results[index].detail
    assert all(r.applied for r in results)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_SRC"}
    return subprocess.run(
        [sys.executable, "-m", "tools.pr", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
    )


def test_cli_exit_codes(fake_checkout, tmp_path):
    out = tmp_path / "out"
    upstream_edit(fake_checkout, *pick_line(fake_checkout), "upstream moved on")
    # The step-by-step check (every commit's tests at that commit) takes
    # longer than CI has; `make pr` runs it, test_pr_steps.py tests its parts.
    ok = run_cli(
        "--out",
        str(out),
        "--pytorch-src",
        str(fake_checkout),
        "--onto",
        "v2.13.0",
        "--no-step-checks",
    )
    assert ok.returncode == 0, ok.stderr
    assert "apply" in ok.stdout and (out / pr.PR_DESCRIPTION).is_file()
    assert "onto v2.13.0" in (out / pr.PR_DESCRIPTION).read_text()

    no_src = run_cli("--out", str(out), "--onto", "HEAD", "--pytorch-src", "")
    assert no_src.returncode == 2 and "--onto needs --pytorch-src" in no_src.stderr
    before = sorted(p.name for p in out.iterdir())
    not_torch = run_cli("--out", str(out), "--pytorch-src", str(tmp_path))
    assert not_torch.returncode == 1 and "not a PyTorch checkout" in not_torch.stderr
    assert "wrote" not in not_torch.stdout  # refused before exporting anything
    assert sorted(p.name for p in out.iterdir()) == before


def pick_line(root: Path) -> tuple[str, str]:
    """Any line of lowering.py: an upstream change the series does not touch."""
    rel = "torch/_inductor/lowering.py"
    line = (root / rel).read_text().splitlines()[0]
    return rel, line


def test_bench_table_prefers_the_best_times():
    row = {
        "workload": "layernorm",
        "threads": 1,
        "patched_over_stock": 0.5,
        **{f"{v}_median_ms": 9.0 for v in ("eager", "stock", "patched")},
        **{f"{v}_min_ms": 1.25 for v in ("eager", "stock", "patched")},
    }
    table = pr.bench_table([row])
    assert "ms (best)" in table[0] and "| 1.25 | 1.25 | 1.25 |" in table[2]
    del row["eager_min_ms"]
    assert "ms (median)" in pr.bench_table([row])[0]


def test_exported_helper_ships_every_switch_on():
    # The exported cpp_loop_nests.py defines shipped_config() as every
    # switch on; that holds while every flag of fusion_overlay/flags.py defaults on.
    from fusion_overlay.flags import FLAGS

    assert all(flag.default for flag in FLAGS), [f.name for f in FLAGS if not f.default]


def test_each_commit_names_the_upstream_interfaces_it_adds():
    by_patch = {p.name[:4]: pr.upstream_interfaces(p) for p in load_series().patches}
    assert by_patch["0001"] == []
    # a lowering hook: the BaseScheduling method (CppScheduling's override is
    # implied) and how lowering reaches a device's scheduling
    assert by_patch["0004"] == [
        "common.get_device_scheduling",
        "V.graph.get_device_scheduling",
        "BaseScheduling.two_step_variance_threshold",
    ]
    assert "BackendFeature.LOOP_ORDERING_AFTER_FUSION" in by_patch["0005"]
    assert "SchedulerNode.loop_body" in by_patch["0005"]
    assert by_patch["0021"] == ["BaseScheduling.decompose"]
    # a method only the C++ backend has stays listed
    assert by_patch["0003"] == ["CppScheduling.outer_loop_fusion_depth"]


def test_step_checks_run_over_a_stock_torch_of_the_series_release(tmp_path):
    def site(name, version):
        root = tmp_path / name / "lib/python3.11/site-packages"
        (root / "torch").mkdir(parents=True)
        (root / "torch/version.py").write_text(f"__version__ = '{version}+cpu'\n")
        return root

    release = pr.UPSTREAM_REF[1:]
    other = "2.13.0" if release != "2.13.0" else "2.15.0"
    patched = site(".venv", release)
    older = site(".venv-stock-other", other)
    stock = site(".venv-stock", release)
    # a newer release's config.py does not import over an older torch, and a
    # patched venv holds overlay modules the partial tree must not see
    assert pr.step_check_roots([patched, older, stock]) == [stock, patched]

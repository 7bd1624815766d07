"""tools/pr_slice.py, tools/pr_tests.py, tools/pr_steps.py: the pieces of
`make pr`'s per-step export, on small made-up modules and tests.

One test runs a converted test file with the stock venv's Python (no
compile); the rest are text and file checks.
"""

from __future__ import annotations

import ast
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from tools import pr
from fusion_overlay.patchset import load_overlay_files, load_series
from tools.pr_slice import Slicer, SliceError, attribute_uses, imports_in_text
from tools.pr_steps import FAILED, PASSED, SKIPPED, overlay_tree, junit_outcomes
from tools.pr_tests import (
    TestExportError,
    closure,
    drop_absent_flags,
    source_of,
    to_upstream,
)

COSTS = textwrap.dedent(
    '''\
    """Costs."""

    from __future__ import annotations

    import math
    from typing import TYPE_CHECKING

    from .helpers import H1, H2

    if TYPE_CHECKING:
        from .helpers import Kind


    # The first constant.
    A = 1
    B = 2


    def uses_a() -> float:
        return A * math.pi


    def uses_b(kind: Kind) -> int:
        return B + H1


    def uses_h2() -> int:
        return H2
    '''
)
HELPERS = "H1 = 1\nH2 = 2\nKind = int\n"
FILES = {"pkg/costs.py": COSTS, "pkg/helpers.py": HELPERS}


def test_a_slice_keeps_what_its_names_use_in_order():
    slicer = Slicer(FILES)
    added = slicer.add("pkg/costs.py", ["uses_a"], "step 1")
    assert [(m, n) for m, n, _ in added] == [
        ("pkg/costs.py", "uses_a"),
        ("pkg/costs.py", "A"),
    ]
    text = slicer.render("pkg/costs.py")
    assert "# The first constant.\nA = 1" in text and "B = 2" not in text
    assert "import math" in text and "helpers" not in text
    assert "TYPE_CHECKING" not in text  # the block imports nothing used yet
    ast.parse(text)
    assert not slicer.has("pkg/helpers.py")


def test_a_slice_follows_names_into_other_modules_and_back_to_whole():
    slicer = Slicer(FILES)
    slicer.add("pkg/costs.py", ["uses_b"], "step 1")
    text = slicer.render("pkg/costs.py")
    assert "from .helpers import H1\n" in text  # H2 is not used yet
    assert "if TYPE_CHECKING:\n    from .helpers import Kind" in text
    assert slicer.defines_now("pkg/helpers.py", "H1")
    assert slicer.defines_now("pkg/helpers.py", "Kind")
    assert not slicer.defines_now("pkg/helpers.py", "H2")
    slicer.add_all("pkg/costs.py")
    assert slicer.complete("pkg/costs.py")
    assert slicer.render("pkg/costs.py") == COSTS  # byte for byte


def test_a_missing_name_is_an_error():
    with pytest.raises(SliceError, match="no 'nope'"):
        Slicer(FILES).add("pkg/costs.py", ["nope"], "step 1")


def test_hook_imports_read_multi_line_and_module_imports():
    text = (
        "    from .cpp_fusion.scheduling.loop_ordering import (\n        a,\n"
        "        b,\n    )\n"
        "    from .cpp_fusion.emitters import kernel_helpers as helpers\n"
        "    helpers.write(x)\n"
    )
    files = {
        "torch/_inductor/codegen/cpp_fusion/scheduling/loop_ordering.py",
        "torch/_inductor/codegen/cpp_fusion/emitters/kernel_helpers.py",
    }
    found = imports_in_text("torch/_inductor/codegen/cpp.py", text, files)
    assert found == {
        "torch/_inductor/codegen/cpp_fusion/scheduling/loop_ordering.py": {"a", "b"},
        "torch/_inductor/codegen/cpp_fusion/emitters/kernel_helpers.py": {"write"},
    }


def test_switches_not_yet_added_are_dropped_when_they_turn_a_feature_off():
    text = (
        'X = {"cpp.threads": 2, "cpp.later": False, "cpp.on": True}\n'
        'Y = {"cpp.later": False}\n'
    )
    out, needed = drop_absent_flags(text, {"later", "on"})
    assert out == 'X = {"cpp.threads": 2, "cpp.on": True}\nY = {}\n'
    assert needed == {"on"}


PYTEST_FILE = textwrap.dedent(
    '''\
    """A made-up test file of ours."""

    from __future__ import annotations

    import os

    import pytest

    import helper_mod

    SKIP = pytest.mark.skipif(False, reason="never")


    @pytest.fixture
    def value_of(monkeypatch):
        def set_value(v):
            monkeypatch.setattr(helper_mod, "VALUE", v)

        return set_value


    def code_of(n):
        return "for(" * n


    @pytest.mark.parametrize("n, loops", [(1, 1), (2, 2)], ids=["one", "two"])
    def test_counts(n, loops):
        assert code_of(n).count("for(") == loops


    @SKIP
    def test_fixture_and_env(value_of, monkeypatch):
        value_of(3)
        monkeypatch.setenv("PR_STEPS_TEST", "1")
        assert helper_mod.VALUE == 3
        assert os.environ["PR_STEPS_TEST"] == "1"


    @pytest.mark.parametrize(("a", "b"), [(1, 2)])
    def test_raises(a, b):
        code = "x" * a
        assert "x" in code and a < b
        assert "y" not in code
        with pytest.raises(ValueError, match="boom"):
            raise ValueError("boom")


    def test_value_restored():
        assert helper_mod.VALUE == 0
    '''
)


def _run_converted(out: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a converted file (beside a `helper_mod` with VALUE = 0) in the stock
    venv, as upstream's tests run; it must pass."""
    python = REPO_ROOT / ".venv-stock" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-stock")
    (tmp_path / "helper_mod.py").write_text("VALUE = 0\n")
    (tmp_path / "test_cpu_made_up.py").write_text(out)
    # With CI set, upstream's run_tests writes XML through xmlrunner, which
    # only upstream's CI image has: run the file as a developer would.
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    proc = subprocess.run(
        [str(python), "test_cpu_made_up.py", "-v"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_pytest_file_becomes_a_testcase_file_that_runs(tmp_path):
    out = to_upstream(
        PYTEST_FILE, "test/test_made_up.py", "test/inductor/test_cpu_made_up.py", set()
    )
    assert "import pytest" not in out and "monkeypatch" not in out
    assert "class CPUMadeUpTests(TestCase):" in out
    assert "instantiate_parametrized_tests(CPUMadeUpTests)" in out
    assert 'subtest((1, 1), name="one")' in out
    assert 'FileCheck().check_not("y").run(code)' in out
    assert 'self.assertRaisesRegex(ValueError, "boom")' in out
    assert "value_of = self.value_of()" in out
    proc = _run_converted(out, tmp_path)
    for name in ("test_counts_one", "test_counts_two", "test_raises_a_1_b_2"):
        assert name in proc.stderr
    assert "Ran 5 tests" in proc.stderr


def test_a_yielding_fixture_is_refused():
    text = textwrap.dedent(
        """\
        import pytest

        @pytest.fixture
        def graph():
            with open("x") as f:
                yield f

        def test_uses(graph):
            assert graph
        """
    )
    with pytest.raises(TestExportError, match="fixture graph yields"):
        to_upstream(text, "test/test_made_up.py", "test/inductor/test_cpu_x.py", set())


AUTOUSE_FILE = textwrap.dedent(
    """\
    import pytest

    import helper_mod


    @pytest.fixture(autouse=True)
    def small_threshold(monkeypatch):
        monkeypatch.setattr(helper_mod, "VALUE", 7)


    def test_sees_the_fixture():
        assert helper_mod.VALUE == 7


    def test_restores_it(monkeypatch):
        monkeypatch.setattr(helper_mod, "VALUE", 0)
        assert helper_mod.VALUE == 0
    """
)


def test_an_autouse_fixture_runs_first_in_every_converted_test(tmp_path):
    """pytest runs an autouse fixture for every test; dropping it in the
    TestCase form would test other inputs than ours (0022's size threshold)."""
    out = to_upstream(
        AUTOUSE_FILE, "test/test_made_up.py", "test/inductor/test_cpu_made_up.py", set()
    )
    assert "def small_threshold(self):" in out
    for test in ("test_sees_the_fixture", "test_restores_it"):
        body = out.split(f"def {test}(self):\n", 1)[1]
        assert body.lstrip().startswith("self.small_threshold()\n"), body
    # a slice that keeps one test keeps the fixture it implicitly uses
    source = source_of("test/test_made_up.py", AUTOUSE_FILE, set())
    kept, _ = closure(source, ["test_sees_the_fixture"])
    assert any(source.units[i].node.name == "small_threshold" for i in kept)
    proc = _run_converted(out, tmp_path)
    assert "Ran 2 tests" in proc.stderr


def test_junit_outcomes_per_test_function(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="test_cpu_x.XTests" name="test_a_one"/>'
        '<testcase classname="test_cpu_x.XTests" name="test_a_two">'
        "<failure/></testcase>"
        '<testcase classname="test_cpu_x.XTests" name="test_ab"><skipped/></testcase>'
        '<testcase classname="test_cpu_x.XTests" name="test_b"/>'
        "</testsuite></testsuites>"
    )
    functions = {
        "test/inductor/test_cpu_x.py": ["test_a", "test_ab", "test_b", "test_c"]
    }
    assert junit_outcomes(junit, functions)["test/inductor/test_cpu_x.py"] == {
        "test_a": FAILED,
        "test_ab": SKIPPED,
        "test_b": PASSED,
        "test_c": "not run",
    }


def test_the_step_tree_links_stock_torch_and_writes_ours(tmp_path):
    stock = tmp_path / "site-packages"
    for rel in ("torch/__init__.py", "torch/_inductor/a.py", "torch/lib/x.so"):
        (stock / rel).parent.mkdir(parents=True, exist_ok=True)
        (stock / rel).write_text(rel)
    tree = tmp_path / "tree"
    for rel in ("torch/_inductor/a.py", "torch/_inductor/new.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text("ours")
    dest = overlay_tree(stock, tree, tmp_path / "step")
    assert (dest / "torch/lib").is_symlink() and (
        dest / "torch/__init__.py"
    ).is_symlink()
    assert not (dest / "torch/_inductor").is_symlink()
    assert (dest / "torch/_inductor/a.py").read_text() == "ours"
    assert (dest / "torch/_inductor/new.py").read_text() == "ours"
    assert (stock / "torch/_inductor/a.py").read_text() == "torch/_inductor/a.py"


@pytest.mark.skipif(
    not pr.default_base_roots(), reason="no torch 2.13.0 venv (run `make stock-venv`)"
)
def test_a_test_that_fails_at_its_first_commit_moves_to_the_next(tmp_path):
    """A fake runner fails one test at the first commit it can run at."""
    calls: list[tuple[str, dict[str, list[str]]]] = []
    victim = "test_layernorm_dynamic_shapes"
    dest = "test/inductor/test_cpu_outer_loop_retile.py"

    def runner(label, tree, functions):
        calls.append((label, functions))
        assert (tree / dest).is_file() or dest not in functions
        return {
            d: {n: FAILED if n == victim and len(calls) == 1 else PASSED for n in names}
            for d, names in functions.items()
        }

    export = pr.export_series(
        tmp_path / "out",
        identity=("T", "t@example.com"),
        date="2025-01-02T03:04:05+00:00",
        bench_path=tmp_path / "none.json",
        upstream_test_summary=tmp_path / "none.md",
        runner=runner,
    )
    first, second = calls[0][0], calls[1][0]
    assert victim in calls[0][1][dest] and victim in calls[1][1][dest]
    commits = {c.patch.name: c for c in export.commits}
    assert commits[first].check.promoted == {dest: [victim]}
    assert victim not in commits[first].test_files.get(dest, [])
    assert victim in commits[second].test_files[dest]
    assert all(c.check is None or c.check.green for c in export.commits)
    text = (tmp_path / "out" / pr.PR_DESCRIPTION).read_text()
    assert "### Step by step" in text and victim in text
    assert "all passed" in export.checks[-1]
    assert len(load_series().patches) == len(export.patches)
    assert set(load_overlay_files())  # the series is the repo's


def test_module_calls_in_comments_strings_and_file_names_are_not_uses():
    text = (
        "    # see cpp_fusion/emitters/prefetch.py and prefetch.plan\n"
        '    y = prefetch.emit("prefetch.slot")\n'
        '    """the prose of a docstring, prefetch.py\n'
    )
    assert attribute_uses(text) == {"prefetch": {"emit"}}


def test_a_later_patch_calls_through_an_alias_an_earlier_patch_bound():
    files = {"torch/_inductor/codegen/cpp_fusion/emitters/prefetch.py"}
    cpp = "torch/_inductor/codegen/cpp.py"
    aliases: dict[str, str] = {}
    first = imports_in_text(
        cpp, "from .cpp_fusion.emitters import prefetch\n", files, aliases
    )
    later = imports_in_text(cpp, "        prefetch.plan(kernel)\n", files, aliases)
    (module,) = files
    assert first == {module: set()}
    assert later == {module: {"plan"}}

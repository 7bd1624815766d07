"""With every overlay flag off, the patched tree generates stock code.

tools/corpus_codegen.py compiles the same corpus once under pristine torch
2.13.0 (.venv-stock) and once under the patched .venv with every flag of
fusion_overlay/flags.py set to 0 in the environment, each in one subprocess with a
fresh inductor cache; the generated code must match program by program, and
every compiled program must match eager.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PATCHED_VENV, REPO_ROOT, STOCK_VENV, once_per_run, venv_python

from tools.corpus_codegen import PROGRAMS
from fusion_overlay.flags import NAMES, env_all_off

CORPUS_SCRIPT = REPO_ROOT / "tools" / "corpus_codegen.py"
FLAGS_OFF = env_all_off()


def dump_corpus(python: Path, workdir: Path) -> dict:
    workdir.mkdir()
    out = workdir / "dump.json"
    env = {
        **os.environ,
        **FLAGS_OFF,
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache"),
    }
    result = subprocess.run(
        [str(python), str(CORPUS_SCRIPT), "--out", str(out)],
        env=env, cwd=workdir, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"{python} corpus run failed:\n{result.stderr[-4000:]}"
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, dict]:
    stock_python = venv_python(STOCK_VENV)
    if stock_python is None:
        pytest.skip(f"{STOCK_VENV} is missing: run `make stock-venv` (make test does)")
    patched_python = venv_python(PATCHED_VENV) or Path(sys.executable)

    def build(tmp: Path) -> dict[str, dict]:
        # One after the other: the machine's two cores are shared.
        return {
            "stock": dump_corpus(stock_python, tmp / "stock"),
            "patched": dump_corpus(patched_python, tmp / "patched"),
        }

    return once_per_run(tmp_path_factory, "flags_off_corpus", build)


def test_runs_are_what_they_claim(dumps):
    assert dumps["stock"]["overlay_flags"] is None, (
        "the stock venv has the overlay applied"
    )
    assert dumps["patched"]["overlay_flags"] == dict.fromkeys(NAMES, False), (
        "the patched venv lacks the overlay, or ignores the flag environment variables"
    )


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_flags_off_code_matches_stock(dumps, name):
    stock, patched = (dumps[run]["programs"][name] for run in ("stock", "patched"))
    assert "error" not in stock, stock.get("error")
    assert "error" not in patched, patched.get("error")
    if stock["code"] != patched["code"]:
        diff = difflib.unified_diff(
            stock["code"].splitlines(),
            patched["code"].splitlines(),
            "stock",
            "patched (flags off)",
            lineterm="",
        )
        pytest.fail(
            f"{name}: generated code differs from stock:\n" + "\n".join(list(diff)[:80])
        )


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_compiled_matches_eager(dumps, name):
    for run in ("stock", "patched"):
        result = dumps[run]["programs"][name]
        assert "error" not in result, result.get("error")
        assert result["allclose"], (
            f"{run}: {name} max abs error {result['max_abs_err']}"
        )

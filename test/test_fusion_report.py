"""tools.fusion_report: a script that lacks fn or inputs gets a usage error."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO_ROOT


def run_report(script) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.fusion_report", str(script)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        ("import torch\ninputs = (torch.randn(4),)\n", "defines no fn"),
        ("import torch\nfn = torch.nn.LayerNorm(4)\n", "defines no inputs"),
        ("x = 1\n", "defines no fn and no inputs"),
    ],
)
def test_a_script_without_fn_or_inputs_is_a_usage_error(tmp_path, source, missing):
    script = tmp_path / "program.py"
    script.write_text(source)
    result = run_report(script)
    assert result.returncode == 2
    assert "usage: " in result.stderr and missing in result.stderr
    assert "Traceback" not in result.stderr and "KeyError" not in result.stderr
    assert result.stdout == ""  # nothing compiled, nothing reported


def test_a_fn_that_is_not_callable_is_a_usage_error(tmp_path):
    script = tmp_path / "program.py"
    script.write_text("import torch\nfn = 3\ninputs = (torch.randn(4),)\n")
    result = run_report(script)
    assert result.returncode == 2
    assert "fn must be callable, not int" in result.stderr

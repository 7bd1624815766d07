"""Standalone pytest repros of fuzz failures.

A repro carries the program's source as a string, its input specs and input
seed, and runs the fuzzer's own check (``check.assert_overlay_agrees``, which
compiles through ``test/compile_utils.py``).  Written to
``test/regressions/test_fuzz_<digest>.py``, it becomes a permanent test once
the bug is fixed; mark it ``xfail(strict=True)`` to commit it before that.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .program import FuzzCase
from .runner import POISON_TUNABLES

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPRO_DIR = REPO_ROOT / "test" / "regressions"


def signature(kind: str, message: str) -> str:
    """What identifies a crash across programs: kind, first message part, no digits."""
    first = message.strip().splitlines()[0].split("; ")[0] if message.strip() else ""
    return f"{kind}: {re.sub(r'[0-9]+', '#', first)}"


def known_crashes(directory: Path = DEFAULT_REPRO_DIR) -> set[str]:
    """Signatures of crashes that already have an xfail repro in ``directory``.

    The fuzzer counts such crashes as known instead of failing (and shrinking)
    again; wrong results are never matched this way, only crashes.
    """
    found = set()
    for path in sorted(Path(directory).glob("test_fuzz_*.py")):
        text = path.read_text()
        match = re.search(r"^SIGNATURE = (['\"])(.*)\1$", text, re.MULTILINE)
        xfail = "pytest.mark.xfail(strict=True" in text
        if match and xfail and match.group(2).startswith("crash"):
            found.add(match.group(2))
    return found


def repro_path(case: FuzzCase, directory: Path = DEFAULT_REPRO_DIR) -> Path:
    return Path(directory) / f"test_fuzz_{case.digest()}.py"


def render_repro(
    case: FuzzCase,
    kind: str,
    message: str,
    path: Path,
    *,
    found_by: str = "",
    xfail: str = "",
) -> str:
    digest = case.digest()
    details = "\n".join(
        textwrap.fill(part, 76, subsequent_indent="  ")
        for part in message.split("; ")
        if part
    )
    inputs = "".join(f"        {spec!r},\n" for spec in case.inputs)
    marker = f"@pytest.mark.xfail(strict=True, reason={xfail!r})\n" if xfail else ""
    found = f"Found by {found_by}.\n" if found_by else ""
    return (
        f'"""Fuzz repro {digest}: {kind}.\n\n{details}\n\n{found}'
        f"Run: .venv/bin/python -m pytest {_display(path)}\n"
        "The fuzzer ran it on a poisoned heap; where it passes without, run it\n"
        f"with GLIBC_TUNABLES={POISON_TUNABLES}\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "import pytest  # noqa: F401  (for an xfail marker)\n\n"
        "from tools.fuzz.check import assert_overlay_agrees\n"
        "from tools.fuzz.program import FuzzCase, InputSpec\n\n"
        f"SIGNATURE = {signature(kind, message)!r}\n\n"
        f"SOURCE = '''\\\n{case.source}'''\n\n"
        "CASE = FuzzCase(\n"
        "    source=SOURCE,\n"
        f"    inputs=(\n{inputs}    ),\n"
        f"    input_seed={case.input_seed},\n"
        f"    dynamic={case.dynamic},\n"
        f"    config={case.config!r},\n"
        + "".join(f"    {name}={value!r},\n" for name, value in case.variant())
        + ")\n\n\n"
        f"{marker}def test_fuzz_{digest}():\n"
        "    assert_overlay_agrees(CASE)\n"
    )


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def write_repro(
    case: FuzzCase,
    kind: str,
    message: str,
    directory: Path = DEFAULT_REPRO_DIR,
    **kwargs,
) -> Path:
    path = repro_path(case, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_repro(case, kind, message, path, **kwargs))
    return path

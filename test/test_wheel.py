"""make wheel (tools/wheel.py): fake wheels for the format and the refusals, then
the official wheel, installed with pip into a fresh venv (about a minute)."""

from __future__ import annotations

import fnmatch
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import RELEASE, REPO_ROOT, write_pristine_torch

from fusion_overlay import overlay as tool
from tools import wheel
from fusion_overlay.patchset import supported_releases
from fusion_overlay.target import TargetError, resolve_target

TAGS = "cp311-cp311-linux_x86_64"
LABEL = tool.load_overlay().label
VERSION = f"{RELEASE}+cpu.{LABEL}"
TOUCHED = tool.load_overlay().series.touched_paths()


def make_fake_wheel(
    directory: Path, version: str = f"{RELEASE}+cpu", version_py: str | None = None
) -> Path:
    """A torch wheel holding the pinned upstream files, a library and dist-info;
    `version_py`: torch.__version__ where it differs from the wheel's name."""
    tree = write_pristine_torch(directory / "tree", version=version_py or version)
    (tree / "torch" / "lib").mkdir()
    (tree / "torch" / "lib" / "libfake.so").write_bytes(bytes(range(256)) * 64)
    info = f"torch-{version}.dist-info"
    files = {
        p.relative_to(tree).as_posix(): p.read_bytes()
        for p in sorted(tree.rglob("*"))
        if p.is_file()
    }
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\nbody\n".encode()
    )
    files[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {TAGS}\n".encode()
    )
    rows = [(n, wheel.record_hash(d), str(len(d))) for n, d in files.items()]
    files[f"{info}/RECORD"] = wheel.write_record([*rows, (f"{info}/RECORD", "", "")])
    path = directory / f"torch-{version}-{TAGS}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            member = zipfile.ZipInfo(name, date_time=(2026, 7, 3, 22, 22, 0))
            mode = 0o100755 if name.endswith(".so") else 0o100644
            member.external_attr = mode << 16
            zf.writestr(member, data, zipfile.ZIP_DEFLATED)
    return path


def build(source: Path, out: Path) -> wheel.Built:
    return wheel.build(source, out, tool.load_overlay())


# --------------------------------------------------------------------------
# Fake wheels: format, determinism, refusals


def test_fake_wheel_gets_the_overlay_a_version_label_and_a_true_record(tmp_path):
    built = build(make_fake_wheel(tmp_path), tmp_path / "out")
    assert built.path.name == f"torch-{VERSION}-{TAGS}.whl"
    assert wheel.check_record(built.path) == []
    info = f"torch-{VERSION}.dist-info"
    assert sorted(built.changed) == sorted(
        [*TOUCHED, "torch/version.py", f"{info}/METADATA"]
    )
    with zipfile.ZipFile(built.path) as zf:
        names = set(zf.namelist())
        assert f"Version: {VERSION}\n" in zf.read(f"{info}/METADATA").decode()
        assert f"__version__ = '{VERSION}'" in zf.read("torch/version.py").decode()
        assert not any(n.startswith(f"torch-{RELEASE}+cpu.dist-info/") for n in names)
        assert set(tool.load_overlay().modules) <= names
        assert "torch/.fusion_overlay/state.json" in names
        assert b"outer_loop_fusion_retile" in zf.read("torch/_inductor/config.py")
        lib = zf.getinfo("torch/lib/libfake.so")
        assert lib.external_attr >> 16 == 0o100755


def test_unchanged_members_are_copied_compressed_byte_for_byte(tmp_path):
    source = make_fake_wheel(tmp_path)
    built = build(source, tmp_path / "out")

    def raw(path: Path, name: str) -> bytes:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(name)
            assert zf.fp is not None
            zf.fp.seek(info.header_offset + 26)
            skip = int.from_bytes(zf.fp.read(2), "little")
            skip += int.from_bytes(zf.fp.read(2), "little")
            zf.fp.seek(skip, os.SEEK_CUR)
            return zf.fp.read(info.compress_size)

    for name in ("torch/lib/libfake.so", "torch/__init__.py"):
        assert raw(built.path, name) == raw(source, name)


def test_same_source_and_series_give_the_same_wheel(tmp_path):
    source = make_fake_wheel(tmp_path)
    first = build(source, tmp_path / "a")
    second = build(source, tmp_path / "b")
    assert first.sha256 == second.sha256


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "no such wheel"),
        ("empty-dir", "exactly one torch wheel, found none"),
        ("not-zip", "not a zip archive"),
        ("wrong-version", "supports torch " + ", ".join(supported_releases())),
        ("overlay-wheel", "already has the overlay"),
        ("other-name", "not named like a torch wheel"),
    ],
)
def test_bad_source_is_refused_and_nothing_is_written(tmp_path, case, message):
    source = tmp_path / f"torch-{RELEASE}+cpu-{TAGS}.whl"
    if case == "empty-dir":
        source = tmp_path / "downloads"
        source.mkdir()
    elif case == "not-zip":
        source.write_bytes(b"<html>not found</html>")
    elif case == "wrong-version":
        source = make_fake_wheel(tmp_path, version="2.12.0+cpu")
    elif case == "overlay-wheel":
        source = make_fake_wheel(tmp_path, version=VERSION)
    elif case == "other-name":
        source = make_fake_wheel(tmp_path).rename(tmp_path / f"numpy-2.0-{TAGS}.whl")
    out = tmp_path / "out"
    with pytest.raises((wheel.WheelError, TargetError), match=message):
        build(source, out)
    assert not out.exists() or not any(out.iterdir())


def test_a_cuda_wheel_keeps_the_local_label_only_its_version_py_names(tmp_path):
    # PyPI's CUDA wheels: "torch-2.15.0-...whl", torch.__version__ "2.15.0+cu132"
    source = make_fake_wheel(tmp_path, version=RELEASE, version_py=f"{RELEASE}+cu132")
    built = build(source, tmp_path / "out")
    assert built.version == f"{RELEASE}+{LABEL}"
    with zipfile.ZipFile(built.path) as zf:
        version_py = zf.read("torch/version.py").decode()
    assert f"__version__ = '{RELEASE}+cu132.{LABEL}'" in version_py


def test_edited_upstream_file_in_the_wheel_is_refused(tmp_path):
    source = make_fake_wheel(tmp_path)
    with zipfile.ZipFile(source, "a") as zf:
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("torch/_inductor/config.py", b"# edited\n")
    out = tmp_path / "out"
    message = f"not the pristine torch {RELEASE} file"
    with pytest.raises(tool.OverlayError, match=message):
        build(source, out)
    assert list(out.iterdir()) == []  # no wheel, no leftover stage


def test_cli_reports_a_bad_source_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tools.wheel", str(tmp_path / "nope.whl"),
         "--out", str(tmp_path / "out")],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: no such wheel:")


# --------------------------------------------------------------------------
# The version label and the overlay tool


def label_tree(site_packages: Path, label: str) -> None:
    (site_packages / "torch" / "version.py").write_text(
        f"__version__ = '{RELEASE}+cpu.{label}'\n"
    )


def test_verify_accepts_a_wheel_whose_label_names_the_applied_overlay(site_packages):
    tool.apply(resolve_target(site_packages), tool.load_overlay())
    label_tree(site_packages, LABEL)
    message = tool.verify(resolve_target(site_packages), tool.load_overlay())
    assert message.startswith("ok: overlay applied") and "(current)" in message


def test_verify_refuses_a_label_the_files_do_not_match(site_packages):
    tool.apply(resolve_target(site_packages), tool.load_overlay())
    label_tree(site_packages, "fusion.13.h00000000")
    with pytest.raises(tool.OverlayError, match="the overlay applied to .* is fusion"):
        tool.verify(resolve_target(site_packages), tool.load_overlay())


def test_verify_refuses_a_labelled_torch_without_the_overlay(site_packages):
    label_tree(site_packages, LABEL)
    with pytest.raises(tool.OverlayError, match="no overlay is applied"):
        tool.verify(resolve_target(site_packages), tool.load_overlay())


def test_apply_refuses_another_series_over_a_labelled_wheel(site_packages):
    label_tree(site_packages, "fusion.13.h00000000")
    before = (site_packages / "torch/_inductor/config.py").read_bytes()
    with pytest.raises(tool.OverlayError, match="would make torch.__version__ name"):
        tool.apply(resolve_target(site_packages), tool.load_overlay())
    assert (site_packages / "torch/_inductor/config.py").read_bytes() == before


# --------------------------------------------------------------------------
# The official wheel, installed with pip into a fresh venv

SMOKE = """
import runpy, torch
from torch._inductor import config
from torch._inductor.utils import run_and_get_cpp_code
from tools.loopnest import analyze

assert torch.__version__ == {version!r}, torch.__version__
assert config.cpp.outer_loop_fusion_retile
program = runpy.run_path("examples/seed_groupnorm.py")
fn, inputs = program["fn"], program["inputs"]
seed_config = {{"realize_opcount_threshold": 1, "inplace_buffers": False,
               "force_disable_caches": True}}
with config.patch(seed_config), torch.no_grad():
    actual, code = run_and_get_cpp_code(torch.compile(fn), *inputs)
    torch.testing.assert_close(actual, fn(*inputs))
print("nests", [kernel.nests for kernel in analyze(code)])
"""


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def official_wheel(tmp_path_factory) -> Path:
    download = tmp_path_factory.mktemp("upstream")
    run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--only-binary=:all:", f"torch=={RELEASE}", "-d", str(download)])  # fmt: skip
    return wheel.find_source(download)


@pytest.mark.slow  # a fresh venv and a pip install: make test-all
def test_official_wheel_installs_with_pip_and_compiles_the_seed_to_one_nest(
    tmp_path, official_wheel
):
    built = build(official_wheel, tmp_path / "out")
    # the official wheel's labels are kept: "+cpu" in a CPU wheel's name, a
    # CUDA wheel's "+cu130" in its version.py only
    source = wheel.inspect_source(official_wheel)
    assert built.version == wheel.overlay_version(source.version, LABEL)
    assert built.path.name.startswith(f"torch-{built.version}-")
    version = wheel.overlay_version(wheel.torch_version_of(official_wheel), LABEL)
    assert wheel.torch_version_of(built.path) == version
    assert wheel.check_record(built.path) == []

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", str(built.path)])
    verify = run([python, "-m", "fusion_overlay.overlay", "verify"], cwd=REPO_ROOT)
    assert "ok: overlay applied" in verify.stdout and "(current)" in verify.stdout
    assert str(venv) in verify.stdout

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    smoke = run([python, "-c", SMOKE.format(version=version)], cwd=REPO_ROOT, env=env)
    assert "nests [1]\n" in smoke.stdout
    check_dockerfile(built.path, python)


def check_dockerfile(built: Path, python: str) -> None:
    """The Dockerfile as far as this machine goes (no container daemon): its
    base image's Python is the wheel's, its COPY names the wheel `make
    wheel` writes, and its `python -c` checks pass in a venv where the wheel
    is installed as its `pip install` does."""
    lines = (REPO_ROOT / "Dockerfile").read_text().splitlines()
    base = next(line.split()[1] for line in lines if line.startswith("FROM "))
    major, minor = base.split(":")[1].split("-")[0].split(".")[:2]
    assert f"-cp{major}{minor}-" in built.name, (base, built.name)
    copy = next(line.split()[1] for line in lines if line.startswith("COPY "))
    assert fnmatch.fnmatch(f"build/wheel/{built.name}", copy), (copy, built.name)
    checks = [line for line in lines if line.startswith("RUN python -c ")]
    assert checks
    for line in checks:
        code = shlex.split(line.removeprefix("RUN "))[2]
        run([python, "-c", code], cwd="/")


def test_make_build_on_a_source_layout_of_every_python_file_of_the_wheel(
    tmp_path, official_wheel
):
    """As far as `make build` goes without PyTorch's C++ sources: the checks,
    the apply over all of the release's Python files (no overlay module lands on
    an upstream file), and the patched tree byte-compiles."""
    src = tmp_path / "pytorch"
    with zipfile.ZipFile(official_wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".py") and name.split("/")[0] in ("torch", "torchgen"):
                zf.extract(name, src)
    (src / "version.txt").write_text(f"{RELEASE}\n")
    (src / "setup.py").write_text("raise SystemExit('placeholder: no C++ sources')\n")
    (src / "requirements.txt").write_text("")
    result = subprocess.run(
        ["make", "--no-print-directory", "build", f"PYTORCH_SRC={src}",
         "BUILD_PYTHON=true", "MAX_JOBS=1"],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "applied to" in result.stdout
    status = run([sys.executable, "-m", "fusion_overlay.overlay", "status", "--target",
                  str(src)], cwd=REPO_ROOT)  # fmt: skip
    assert "(source)" in status.stdout and "overlay: applied, current, clean" in (
        status.stdout
    )
    run([sys.executable, "-m", "compileall", "-q", str(src / "torch" / "_inductor")])

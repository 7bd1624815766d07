"""Digests of the C++ the overlay generates, per vector ISA: the proof of a refactoring.

    python -m tools.codegen_digest --out DIR [--isa avx512 ...] [--fuzz-sample N]
                                   [--against DIGESTS.json]

For every ISA, ``tools/isa_codegen.py`` generates the corpus of
``tools/corpus_codegen.py`` and ``N`` programs the fuzzer draws (a fixed
seed), under the shipped flags and a small last-level cache so that the
memory features take their paths.  The kernels' sources are hashed per ISA
(sha256 over the sorted kernel file names and their bytes) and written to
``DIR/digests.json``.  Run it before a change that must not change codegen,
keep the JSON, and run it after with ``--against``: it exits 1 unless every
ISA's digest is the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tools.fuzz.check import SPECULATE_EVERYWHERE_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ISAS = ("avx512", "avx2", "none", "neon", "sve256")
CACHE_BYTES = 65536  # every corpus program overflows it: streaming, prefetch


def generate(isa: str, out: Path, fuzz_sample: int, fuzz_seed: int) -> None:
    env = {
        **os.environ,
        **SPECULATE_EVERYWHERE_ENV,  # the corpus is small: every feature's path
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    cmd = [
        sys.executable, "-m", "tools.isa_codegen", "--isa", isa,
        "--out", str(out), "--cache-bytes", str(CACHE_BYTES),
        "--fuzz-sample", str(fuzz_sample), "--fuzz-seed", str(fuzz_seed),
    ]  # fmt: skip
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"isa_codegen --isa {isa} failed:\n{result.stderr[-4000:]}")


def digest(out: Path) -> dict:
    """Programs, kernel files and the sha256 of their sources in one ISA's dump."""
    manifest = json.loads((out / "manifest.json").read_text())
    files = sorted(k for p in manifest["programs"].values() for k in p["kernels"])
    sha = hashlib.sha256()
    for name in files:
        sha.update(name.encode())
        sha.update((out / name).read_bytes())
    return {
        "programs": len(manifest["programs"]),
        "kernel_files": len(files),
        "sha256": sha.hexdigest(),
    }


def compare(now: dict, before: dict) -> list[str]:
    """The ISAs whose digest differs from (or is missing in) ``before``."""
    return [
        isa for isa in now if before.get(isa, {}).get("sha256") != now[isa]["sha256"]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--isa", nargs="*", default=list(DEFAULT_ISAS))
    parser.add_argument("--fuzz-sample", type=int, default=24)
    parser.add_argument("--fuzz-seed", type=int, default=3)
    parser.add_argument("--against", type=Path, help="digests.json of an earlier run")
    args = parser.parse_args(argv)
    digests = {}
    for isa in args.isa:
        generate(isa, args.out / isa, args.fuzz_sample, args.fuzz_seed)
        digests[isa] = digest(args.out / isa)
        d = digests[isa]
        print(f"{isa:8} {d['programs']:3} programs  sha256 {d['sha256'][:16]}")
    (args.out / "digests.json").write_text(json.dumps(digests, indent=1) + "\n")
    if args.against is None:
        return 0
    differ = compare(digests, json.loads(args.against.read_text()))
    print("identical" if not differ else f"DIFFERENT: {', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

# Inductor fusion overlay over torch 2.13.0, 2.14.1 and 2.15.0 (CPU C++ backend).
# Every target that needs a venv creates it; `make` alone prints the help.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
# TORCH: the upstream release, one of patches/*/ (a series each).  The default
# is the newest that pip installs here without a download; 2.15.0 comes from
# the registry, past the machine's torch<=2.14.1 pip constraint.
SUPPORTED_TORCH := $(sort $(patsubst patches/%/series,%,$(wildcard patches/*/series)))
TORCH ?= 2.14.1
ifeq ($(filter $(TORCH),$(SUPPORTED_TORCH)),)
$(error TORCH=$(TORCH) has no series; supported: $(SUPPORTED_TORCH))
endif
TORCH_VERSION := $(TORCH)
# the release for tools run without a torch of their own (tools.pr, series_repo)
export FUSION_OVERLAY_TORCH := $(TORCH)
space := $(subst ,, )
PIP_TORCH := $(if $(filter 2.15.%,$(TORCH)),PIP_CONSTRAINT=/dev/null)
TEST_DEPS := numpy expecttest hypothesis pytest pytest-xdist coverage
# One venv pair per release; .venv and .venv-stock link to TORCH's, so the
# tools and tests that name them follow TORCH.
VENV_DIR := .venv-$(TORCH)
STOCK_VENV_DIR := .venv-stock-$(TORCH)
VENV := .venv
STOCK_VENV := .venv-stock
VENV_PY := $(VENV)/bin/python
STOCK_PY := $(STOCK_VENV)/bin/python
# What `make test` runs: all of test/ (the tool's, flags-off == stock, and the
# feature tests). Narrow it with e.g. TESTS=test/test_overlay_tool.py.
TESTS ?= test/
# pytest-xdist workers (one per core) and the 30 slowest tests in the log.
PYTEST_WORKERS ?= $(shell nproc)
PYTEST_ARGS ?=
# make build: the PyTorch v2.13.0 checkout, the jobs, and the python whose env
# receives the editable torch.  The steps are PyTorch's documented source build
# (README "From Source"): pip install -r requirements.txt (cmake, ninja, ...),
# then USE_CUDA=0 python -m pip install --no-build-isolation -v -e .
PYTORCH_SRC ?=
MAX_JOBS ?= $(shell nproc)
BUILD_PYTHON ?= python

.PHONY: help install stock-venv cross-compiler test test-setup test-versions test-release test-slow test-all verify uninstall status demo bench bench-shapes bench-models bench-pyhpc bench-alloc bench-compile-time model-deps bench-counts codegen-digest fuzz fuzz-mutants build wheel rebase-check pr lint fuzz-merge upstream-test upstream-test-merge clean

help:
	@echo "make install     .venv: torch $(TORCH_VERSION) + test deps, overlay applied"
	@echo "make stock-venv  .venv-stock: pristine torch $(TORCH_VERSION) (reference)"
	@echo "make test        install + stock-venv + lint + cross-compiler, then pytest $(TESTS)"
	@echo "make test-versions  the release-dependent tests on every release ($(SUPPORTED_TORCH))"
	@echo "make test-release   the same on TORCH alone"
	@echo "make test-all    make test, then test-slow (the tests marked slow), make pr (step"
	@echo "                 check), fuzz-mutants, a 5-minute fuzz run"
	@echo "make cross-compiler  Debian's aarch64, ppc64le and s390x g++ and clang (apt-get, as"
	@echo "                 root) for test/test_cross_isa_compile.py"
	@echo "make lint        ruff (tools/ test/ overlay/), mypy (tools/, overlay modules)"
	@echo "make demo        outer loop nests and timings, overlay flags off vs on"
	@echo "make bench       benchmarks: eager vs stock vs patched -> bench/results/"
	@echo "make bench-shapes  the same over normalizations of many shapes"
	@echo "make bench-models  random-init transformers/diffusers models and their norms"
	@echo "make bench-alloc   eager and compiled under glibc malloc (default, tuned), jemalloc, tcmalloc"
	@echo "                 (TORCHBENCH_SRC=checkout: TorchBench's pyhpc models too)"
	@echo "make bench-pyhpc TORCHBENCH_SRC=checkout  TorchBench's pyhpc models alone"
	@echo "make bench-compile-time  CPU seconds of compiling: stock, loop ordering off, shipped"
	@echo "                 (COMPILE_TIME_ARGS=\"--suite mismatch|models|fuzz|all\"; PR_TIME_SRC=dir"
	@echo "                 adds upstream's PR-time CPU benchmarks, valgrind instructions)"
	@echo "                 (COMPILE_TIME_ARGS=\"--without FLAG,...\": what each feature costs)"
	@echo "make bench-counts  instructions and cache misses where patched code differs from stock"
	@echo "make codegen-digest [DIGEST_AGAINST=digests.json]  generated C++ per ISA, byte-identical check"
	@echo "                 and softmaxes at the models' shapes (BENCH_MODELS_ARGS=--quick)"
	@echo "make fuzz        random programs: eager vs overlay flags off vs on (FUZZ_SECONDS,"
	@echo "                 FUZZ_EXAMPLES, FUZZ_SEED, FUZZ_PROFILE, FUZZ_WORKERS, FUZZ_COVERAGE=1,"
	@echo "                 FUZZ_DB=shared dir or redis://host:port/0)"
	@echo "                 FUZZ_SHARD=i/N: one shard of a campaign; make fuzz-merge FUZZ_RUNS=dirs"
	@echo "make fuzz-mutants  mutation testing of the overlay with the fuzzer (MUTANT_SECONDS)"
	@echo "make verify      check .venv's torch against the pinned upstream hashes"
	@echo "make status      what is applied to .venv's torch"
	@echo "make uninstall   revert .venv's torch to pristine"
	@echo "make wheel [WHEEL_SOURCE=torch.whl|dir]"
	@echo "                 the official torch $(TORCH_VERSION) wheel with the overlay -> build/wheel/"
	@echo "make build PYTORCH_SRC=/path [MAX_JOBS=n]"
	@echo "                 apply to a checkout of $(addprefix v,$(SUPPORTED_TORCH)) and build it (hours)"
	@echo "make rebase-check UPSTREAM_DIR=/path"
	@echo "                 would the series apply to that upstream tree? per patch and hunk"
	@echo "make pr [PYTORCH_SRC=/path [ONTO=ref]]"
	@echo "                 git format-patch set + PR_DESCRIPTION.md against v$(TORCH_VERSION) -> build/pr/"
	@echo "make upstream-test PYTORCH_SRC=/path [UPSTREAM_SHARD=i/N UPSTREAM_WORKERS=n"
	@echo "                 UPSTREAM_TESTS=.. UPSTREAM_K=.. UPSTREAM_FLAGS=..]"
	@echo "                 upstream's inductor CPU suites, stock vs patched (hours)"
	@echo "make upstream-test-merge [UPSTREAM_RUNS=dirs]  one report from the shards' runs"
	@echo "make clean       remove the venvs and caches"

# Venvs are built once (the stamp); the overlay is applied on every
# `make install`, which is a no-op when the series did not change.
$(VENV_DIR)/.deps-installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV_DIR)
	$(PIP_TORCH) $(VENV_DIR)/bin/python -m pip install --quiet --no-cache-dir torch==$(TORCH) $(TEST_DEPS)
	$(VENV_DIR)/bin/python -m pip install --quiet --no-build-isolation -e .
	touch $@

# The stock venv holds the patched venv's wheels, without the project and
# without the overlay: its site-packages are hard links to .venv-R's (torch's
# CUDA build is 5.5 GB, and a CI disk does not always hold two), and where
# .venv-R already has the overlay, it is reverted in the copy.  Hard links are
# safe: the overlay tool and Python's bytecode writer replace files
# (os.replace), never write one in place, so a file changed in one venv gets a
# new inode there and the other keeps the pristine one (`stock-venv` verifies
# its sha256 pins every time).
SITE_PACKAGES = $$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
$(STOCK_VENV_DIR)/.deps-installed: $(VENV_DIR)/.deps-installed
	rm -rf $(STOCK_VENV_DIR)
	$(PYTHON) -m venv --without-pip $(STOCK_VENV_DIR)
	@set -e; src=$(call SITE_PACKAGES,$(VENV_DIR)); dst=$(call SITE_PACKAGES,$(STOCK_VENV_DIR)); \
	for entry in "$$src"/*; do \
	  case "$${entry##*/}" in __editable__*|inductor_fusion_overlay-*) continue;; esac; \
	  cp -al "$$entry" "$$dst"/; \
	done; \
	$(STOCK_VENV_DIR)/bin/python -m fusion_overlay.overlay revert --target "$$dst"
	touch $@

# .venv and .venv-stock become links to TORCH's venvs; a real directory
# there (a checkout from before the per-release venvs) is refused.
define link_venv
	@if [ -e $(2) ] && [ ! -L $(2) ]; then \
	  echo "error: $(2) is a directory, not a link to a per-release venv: make clean" >&2; exit 2; fi
	@ln -sfn $(1) $(2)
endef

# The stock venv's copy is made before the overlay is applied here (| ...):
# with -j2, the copy would otherwise race the apply.
install: $(VENV_DIR)/.deps-installed | $(STOCK_VENV_DIR)/.deps-installed
	$(call link_venv,$(VENV_DIR),$(VENV))
	$(VENV_PY) -m fusion_overlay.overlay apply

# tools/ is not installed in the stock venv; -m finds it from the repo root.
stock-venv: $(STOCK_VENV_DIR)/.deps-installed
	$(call link_venv,$(STOCK_VENV_DIR),$(STOCK_VENV))
	$(STOCK_PY) -m fusion_overlay.overlay verify --pristine

# Lint tools, pinned: upstream-like ruff rules and mypy (pyproject.toml).
LINT_DEPS := ruff==0.17.6 mypy==2.4.1
$(VENV_DIR)/.lint-deps-installed: $(VENV_DIR)/.deps-installed
	$(VENV_DIR)/bin/python -m pip install --quiet $(LINT_DEPS)
	touch $@

# mypy checks the overlay modules inside .venv's patched torch: needs install.
lint: install $(VENV_DIR)/.lint-deps-installed
	$(VENV_PY) -m tools.lint

# test/test_cross_isa_compile.py's compilers: the cross compilers for aarch64
# (NEON, SVE), POWER (VSX) and s390x (ZVECTOR), and clang for the helpers'
# MSVC branches.  Debian's packages, installed with apt-get if missing (CI
# runs as root on a fresh Debian machine); anywhere else, install them by hand.
CROSS_CXX := aarch64-linux-gnu-g++ powerpc64le-linux-gnu-g++ s390x-linux-gnu-g++ clang
CROSS_PACKAGE := g++-aarch64-linux-gnu g++-powerpc64le-linux-gnu g++-s390x-linux-gnu clang
cross-compiler:
	@missing=""; for cxx in $(CROSS_CXX); do command -v $$cxx >/dev/null || missing="$$missing $$cxx"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then \
	  echo "error:$$missing not found and no apt-get to install them; install" \
	       "$(CROSS_PACKAGE) (or those compilers) by hand" >&2; exit 2; fi; \
	echo "installing $(CROSS_PACKAGE) with apt-get"; \
	if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	         --no-install-recommends $(CROSS_PACKAGE); } >/dev/null; then \
	  echo "error: apt-get could not install $(CROSS_PACKAGE) (as root? see above)" >&2; \
	  exit 2; fi; \
	for cxx in $(CROSS_CXX); do command -v $$cxx >/dev/null || { \
	  echo "error: $(CROSS_PACKAGE) installed but no $$cxx on PATH" >&2; exit 2; }; done

# The setup steps are independent but for lint's need of .venv: the two
# venvs, lint and the compilers are made side by side.
# worksteal: a worker that runs out takes queued tests from the other, so a
# long test late in one queue does not leave the other core idle.
test: test-setup
	$(VENV_PY) -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal --durations=30 \
	  -m "not slow" $(PYTEST_ARGS) $(TESTS)

test-setup:
	$(MAKE) --no-print-directory -j2 --output-sync=target install stock-venv lint cross-compiler

# make test-versions: what depends on the upstream release, on every release
# (TORCH=2.13.0, 2.14.1, 2.15.0 in turn, each in its own venv pair): apply,
# verify, revert and the tool's contracts, flags off == stock byte for byte,
# every feature's tests (agreement with eager and structure), the hooks page
# and the ci fuzz campaign.  The links are left on TORCH's venvs.
VERSION_TESTS = test/test_overlay_tool.py test/test_flags_off_matches_stock.py \
  $(shell $(PYTHON) -m fusion_overlay.flags --test-files) test/test_hooks.py \
  test/test_speculation.py test/test_series_repo.py test/test_fuzz.py::test_fuzz_ci_profile
# make test-release: the same for TORCH alone (one CI matrix job per release).
test-versions:
	@set -e; for release in $(SUPPORTED_TORCH); do \
	  echo "== torch $$release"; $(MAKE) --no-print-directory TORCH=$$release test-release; \
	done
	$(MAKE) --no-print-directory install stock-venv

test-release: install stock-venv
	$(VENV_PY) -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal \
	  --durations=10 -m "not slow" $(PYTEST_ARGS) $(VERSION_TESTS)

# The tests marked slow (round trips through pip and fresh venvs).
test-slow: install stock-venv
	$(VENV_PY) -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --durations=30 \
	  -m slow $(PYTEST_ARGS) $(TESTS)

verify: $(VENV_DIR)/.deps-installed
	$(VENV_DIR)/bin/python -m fusion_overlay.overlay verify

status: $(VENV_DIR)/.deps-installed
	$(VENV_DIR)/bin/python -m fusion_overlay.overlay status

uninstall: $(VENV_DIR)/.deps-installed
	$(VENV_DIR)/bin/python -m fusion_overlay.overlay revert

# Benchmarks: eager vs compiled stock (flags off) vs patched, in one process.
# BENCH_ARGS e.g. --threads 1 --only layernorm,groupnorm --reps 31
BENCH_ARGS ?=
bench: install
	$(VENV_PY) -m pip install --quiet matplotlib
	$(VENV_PY) -m tools.bench $(BENCH_ARGS)
	$(VENV_PY) -m tools.results_pages --publish bench

# make bench-shapes: normalizations over many shapes, stock vs patched
# (default allocator run skipped: the shapes stay under 32 MiB).
bench-shapes: install
	$(VENV_PY) -m pip install --quiet matplotlib
	$(VENV_PY) -m tools.bench --suite shapes --no-default-malloc $(BENCH_ARGS)
	$(VENV_PY) -m tools.results_pages --publish shapes

# make bench-compile-time: tools/compile_time.py (CPU seconds of compiling,
# one process per variant and round).  COMPILE_TIME_ARGS e.g. --suite all --rounds 5,
# or --count-calls (Python calls under cProfile: load-independent, one round)
# PR_TIME_SRC=<pytorch>/benchmarks/dynamo/pr_time_benchmarks adds upstream's
# PR-time CPU benchmarks (tools/pr_time.py: instructions under valgrind,
# pristine .venv-stock against .venv; exits 1 outside upstream's margins).
COMPILE_TIME_ARGS ?=
PR_TIME_SRC ?=
PR_TIME_ARGS ?=
bench-compile-time: install model-deps
	$(VENV_PY) -m tools.compile_time $(COMPILE_TIME_ARGS)
	@if [ -n "$(PR_TIME_SRC)" ]; then \
	  $(MAKE) --no-print-directory stock-venv && \
	  $(VENV_PY) -m tools.pr_time --src "$(PR_TIME_SRC)" \
	    --markdown bench/results/pr-time-$(TORCH).md $(PR_TIME_ARGS); \
	fi

# make bench-counts: tools/bench_counts.py (valgrind; deterministic counts
# where the generated C++ differs from stock).  BENCH_COUNTS_ARGS e.g.
# --suite shapes --check
BENCH_COUNTS_ARGS ?=
bench-counts: install
	@command -v valgrind >/dev/null || { echo "bench-counts needs valgrind (apt-get install valgrind)"; exit 2; }
	$(VENV_PY) -m tools.bench_counts $(BENCH_COUNTS_ARGS)

# make codegen-digest: sha256 of the generated C++ per ISA (corpus + fuzz
# programs).  Before a refactoring: make codegen-digest; keep
# build/codegen-digest/digests.json; after: make codegen-digest
# DIGEST_AGAINST=that file (fails unless every ISA's C++ is byte-identical).
DIGEST_OUT ?= build/codegen-digest
DIGEST_AGAINST ?=
codegen-digest: install
	$(VENV_PY) -m tools.codegen_digest --out $(DIGEST_OUT) $(if $(DIGEST_AGAINST),--against $(DIGEST_AGAINST))

# model-deps: transformers, diffusers and matplotlib in the venv (bench-models,
# bench-compile-time's models suite).
model-deps: install
	@$(VENV_PY) -c 'import transformers, diffusers, matplotlib' 2>/dev/null || { \
	  pin=$$(mktemp) && $(VENV_PY) -c 'import torch; print("torch==" + torch.__version__)' > $$pin \
	  && $(VENV_PY) -m pip install --quiet -c $$pin transformers diffusers matplotlib; \
	  status=$$?; rm -f $$pin; exit $$status; }

# make bench-models: tools/bench_models.py.  transformers and diffusers build
# random-init models from configs (no weights downloaded); pip may not move
# torch (the constraint pins the installed build).  timm is not used: it
# imports torchvision, whose x86 PyPI wheel is CUDA-built and does not load
# against torch's CPU build.
BENCH_MODELS_ARGS ?=
bench-models: install model-deps
	$(VENV_PY) -m tools.bench_models $(BENCH_MODELS_ARGS)
	@case " $(BENCH_MODELS_ARGS) " in *" --quick "*) ;; \
	  *) $(VENV_PY) -m tools.results_pages --publish models ;; esac

# make bench-pyhpc: TorchBench's pyhpc models, read from the pytorch/benchmark
# checkout in TORCHBENCH_SRC (never copied here) -> bench/results/pyhpc.md
BENCH_PYHPC_ARGS ?= --processes 3
bench-pyhpc: install
	$(VENV_PY) -m tools.bench_models --suite pyhpc $(BENCH_PYHPC_ARGS)
	@case " $(BENCH_PYHPC_ARGS) " in *" --quick "*) ;; \
	  *) $(VENV_PY) -m tools.results_pages --publish pyhpc ;; esac

# make bench-alloc: tools/bench_alloc.py, eager and compiled under glibc's
# default malloc, its tunables, jemalloc and tcmalloc (each preloaded where
# Debian's libjemalloc2 / libtcmalloc-minimal4 is installed) -> bench/results/alloc.md
BENCH_ALLOC_ARGS ?=
bench-alloc: install
	$(VENV_PY) -m tools.bench_alloc $(BENCH_ALLOC_ARGS)

# make fuzz: tools/fuzz (docs/fuzzing.md).  Empty values take the profile's
# defaults (dev: 300 s; a random seed, printed).  Failures -> test/regressions/.
FUZZ_PROFILE ?= dev
FUZZ_SECONDS ?=
FUZZ_EXAMPLES ?=
FUZZ_SEED ?=
FUZZ_WORKERS ?= $(shell nproc)
FUZZ_COVERAGE ?= 0
# FUZZ_SHARD=I/N: shard I of a campaign of N machines (same FUZZ_SEED and
# FUZZ_PROFILE everywhere); `make fuzz-merge FUZZ_RUNS="dir ..."` joins them.
FUZZ_SHARD ?= 1/1
# FUZZ_BATCH: programs compiled as one graph (empty: the profile's, 4)
FUZZ_BATCH ?=
FUZZ_RUNS ?=
FUZZ_ARGS ?=
# FUZZ_DB: hypothesis' example database shared between machines, a directory
# on shared storage or redis://host:port/0 (docs/fuzzing.md)
FUZZ_DB ?= $(FUZZ_HYPOTHESIS_DB)
export FUZZ_HYPOTHESIS_DB := $(FUZZ_DB)
fuzz: install
	@if [ "$(FUZZ_COVERAGE)" = 1 ]; then $(VENV_PY) -c 'import coverage' 2>/dev/null \
	  || $(VENV_PY) -m pip install --quiet coverage; fi
	$(VENV_PY) -m tools.fuzz run --profile "$(FUZZ_PROFILE)" --seconds "$(FUZZ_SECONDS)" \
	  --examples "$(FUZZ_EXAMPLES)" --seed "$(FUZZ_SEED)" --workers "$(FUZZ_WORKERS)" \
	  --shard "$(FUZZ_SHARD)" --batch "$(FUZZ_BATCH)" \
	  $(if $(filter 1,$(FUZZ_COVERAGE)),--coverage) $(FUZZ_ARGS)

fuzz-merge:
	@if [ -z "$(FUZZ_RUNS)" ]; then \
	  echo "error: set FUZZ_RUNS to the shards' run directories" >&2; exit 2; fi
	$(VENV_PY) -m tools.fuzz merge $(FUZZ_RUNS)

# make fuzz-mutants: the overlay's hand-written mutants, one fuzz run each
# (one worker, stopped at the first failure) after a control run ->
# build/fuzz-mutants/report.md.  Every run checks the control's
# MUTANT_EXAMPLES programs (same seed), reusing the control's flags-off
# results and C++ modules; MUTANT_JOBS mutants at a time.  MUTANT_EXAMPLES=
# (empty) fuzzes MUTANT_SECONDS per mutant instead.  MUTANT_ARGS e.g.
# --only 0009,0011
MUTANT_EXAMPLES ?= 300
MUTANT_JOBS ?= $(shell nproc)
MUTANT_SECONDS ?= 90
MUTANT_ARGS ?=
fuzz-mutants: install
	$(VENV_PY) -m tools.fuzz.mutants --seconds "$(MUTANT_SECONDS)" --jobs "$(MUTANT_JOBS)" \
	  $(if $(MUTANT_EXAMPLES),--examples "$(MUTANT_EXAMPLES)") $(MUTANT_ARGS)

demo: install
	@if [ -f tools/demo.py ]; then $(VENV_PY) -m tools.demo; else echo "no tools/demo.py yet"; fi

build:
	@if [ -z "$(PYTORCH_SRC)" ]; then \
	  echo "error: set PYTORCH_SRC=/path/to/pytorch (a v$(TORCH_VERSION) checkout)" >&2; exit 2; fi
	@if [ ! -d "$(PYTORCH_SRC)" ]; then \
	  echo "error: PYTORCH_SRC=$(PYTORCH_SRC) is not a directory" >&2; exit 2; fi
	@for need in setup.py version.txt torch; do \
	  if [ ! -e "$(PYTORCH_SRC)/$$need" ]; then \
	    echo "error: PYTORCH_SRC=$(PYTORCH_SRC) is not a PyTorch checkout (no $$need)" >&2; exit 2; fi; \
	done
	@if ! grep -Eq '^($(subst $(space),|,$(subst .,\.,$(SUPPORTED_TORCH))))([^0-9]|$$)' "$(PYTORCH_SRC)/version.txt"; then \
	  echo "error: $(PYTORCH_SRC)/version.txt says $$(head -c 40 "$(PYTORCH_SRC)/version.txt");" \
	       "check out one of $(addprefix v,$(SUPPORTED_TORCH))" >&2; exit 2; fi
	@if [ -f "$(PYTORCH_SRC)/.gitmodules" ] \
	    && git -C "$(PYTORCH_SRC)" submodule status --recursive 2>/dev/null | grep -q '^-'; then \
	  echo "error: $(PYTORCH_SRC) has uninitialized submodules; run" \
	       "'git submodule update --init --recursive' there" >&2; exit 2; fi
	cd "$(PYTORCH_SRC)" && $(BUILD_PYTHON) -m pip install -r requirements.txt
	$(PYTHON) -m fusion_overlay.overlay apply --target "$(PYTORCH_SRC)"
	cd "$(PYTORCH_SRC)" && USE_CUDA=0 MAX_JOBS=$(MAX_JOBS) \
	  $(BUILD_PYTHON) -m pip install --no-build-isolation -v -e .

# make wheel: tools/wheel.py (docs/wheel.md).  The
# official wheel comes from `pip download` into build/wheel/upstream/, for
# $(PYTHON)'s version and platform; WHEEL_SOURCE names a wheel (or a dir with
# one) instead.  Needs only $(PYTHON)'s standard library and GNU patch.
WHEEL_SOURCE ?=
WHEEL_DOWNLOAD := build/wheel/upstream
wheel:
	@if [ -z "$(WHEEL_SOURCE)" ]; then \
	  $(PIP_TORCH) $(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: \
	    torch==$(TORCH_VERSION) -d $(WHEEL_DOWNLOAD)/$(TORCH_VERSION); fi
	$(PYTHON) -m tools.wheel "$(or $(WHEEL_SOURCE),$(WHEEL_DOWNLOAD)/$(TORCH_VERSION))" --out build/wheel

# make rebase-check: tools/rebase_check.py (docs/rebase-status.md).  The
# directory holds upstream files at torch/... paths (a checkout at any commit,
# or copies of the files the series touches); it is only read.
UPSTREAM_DIR ?=
rebase-check:
	@if [ -z "$(UPSTREAM_DIR)" ]; then \
	  echo "error: set UPSTREAM_DIR=/path (holding torch/... upstream files)" >&2; exit 2; fi
	$(PYTHON) -m tools.rebase_check "$(UPSTREAM_DIR)" --markdown build/rebase-check.md

# make pr: tools/pr.py (docs/upstreaming.md).  The pristine v$(TORCH_VERSION)
# files come from the stock venv; each commit's tests run there, over the
# partial tree at that commit (PR_ARGS=--no-step-checks skips the runs); ruff
# from .venv checks every cut module.  With PYTORCH_SRC the set is also applied
# (git am --3way, in a throwaway clone) onto ONTO (default HEAD) there.
ONTO ?=
# UPSTREAM_TESTS: a directory holding upstream's test/inductor/ (PYTORCH_SRC
# serves too): the series' edits of upstream tests land in their commits.
UPSTREAM_TESTS ?=
PR_ARGS ?=
# make test-all: make test, then the slow checks: the tests marked slow
# (make test-slow), the series as upstream commits with each commit's tests
# run at its step (make pr), the mutant table, a 5-minute dev fuzz run.
# Upstream's suites need PYTORCH_SRC: make upstream-test (hours; sharded in CI).
test-all: test
	$(MAKE) test-slow
	$(MAKE) pr
	$(MAKE) fuzz-mutants
	$(MAKE) fuzz FUZZ_PROFILE=dev FUZZ_SECONDS=300

pr: stock-venv
	$(PYTHON) -m tools.pr $(if $(PYTORCH_SRC),--pytorch-src "$(PYTORCH_SRC)") \
	  $(if $(ONTO),--onto "$(ONTO)") \
	  $(if $(UPSTREAM_TESTS),--upstream-tests "$(UPSTREAM_TESTS)") $(PR_ARGS)

# make upstream-test: tools/upstream_test.py.  Test files from PYTORCH_SRC (a
# checkout, or a directory holding upstream's test/inductor files), torch from
# .venv-stock and .venv.  The default is the CPU suites in full (SUITES in the
# tool; hours on 2 cores).  UPSTREAM_SHARD=I/N runs one shard (one CI job),
# UPSTREAM_WORKERS=n runs pytest-xdist workers; `make upstream-test-merge
# UPSTREAM_RUNS="dir1 dir2 ..."` makes the one report of the shards.
# UPSTREAM_FLAGS are extra runs, each a space-separated ENV=VALUE list, ";"
# between runs.  UPSTREAM_K, when set, is the -k of every file.
UPSTREAM_TESTS ?= test/inductor/test_cpu_repro.py test/inductor/test_torchinductor.py \
  test/inductor/test_torchinductor_dynamic_shapes.py test/inductor/test_loop_ordering.py \
  test/inductor/test_torchinductor_opinfo.py
UPSTREAM_K ?=
UPSTREAM_SHARD ?= 1/1
UPSTREAM_WORKERS ?= 1
UPSTREAM_FLAGS ?=
UPSTREAM_OUT ?= build/upstream-test$(if $(filter-out 1/1,$(UPSTREAM_SHARD)),/shard-$(subst /,-of-,$(UPSTREAM_SHARD)))
UPSTREAM_RUNS ?= $(wildcard build/upstream-test/shard-*)
UPSTREAM_ARGS ?=
upstream-test:
	@$(PYTHON) -m tools.upstream_test run --check-only --pytorch-src "$(PYTORCH_SRC)" \
	  --tests "$(UPSTREAM_TESTS)" --shard "$(UPSTREAM_SHARD)"
	@$(MAKE) --no-print-directory install stock-venv
	$(VENV_PY) -m tools.upstream_test run --pytorch-src "$(PYTORCH_SRC)" \
	  --tests "$(UPSTREAM_TESTS)" $(if $(UPSTREAM_K),-k "$(UPSTREAM_K)") \
	  --shard "$(UPSTREAM_SHARD)" -n "$(UPSTREAM_WORKERS)" --variants "$(UPSTREAM_FLAGS)" \
	  --out "$(UPSTREAM_OUT)" $(UPSTREAM_ARGS)

upstream-test-merge:
	$(PYTHON) -m tools.upstream_test merge $(UPSTREAM_RUNS) --out build/upstream-test

clean:
	rm -rf $(VENV) $(STOCK_VENV) .venv-[0-9]* .venv-stock-[0-9]* build *.egg-info .hypothesis
	find . -name __pycache__ -not -path './.git/*' -prune -exec rm -rf {} +

# focalcal: two commands on a fresh machine.
#   make book   create .venv, install, run the default experiment sweep, execute every chapter, build HTML
#               (PROFILE=cpu|gpu|paper picks the sweep, RUNS=DIR its results folder, SWEEP=0 builds from
#               the results already in RUNS without running anything, e.g. those copied from a GPU box)
#   make test   create/reuse .venv, run the full test suite (unit, property, oracle, chapters, smoke sweep, book)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= cpu
RUNS   ?= runs/$(PROFILE)
# runs at a time in `make sweep` and `make book` (the cpu profile is sized for 2 cores)
JOBS   ?= 2
# local: JOBS runs at a time on this machine; slurm: SLURM job arrays through submitit (the paper
# profile; SWEEP_ARGS="--slurm-partition gpu --slurm-time 1440 --slurm-array-parallelism 20" passes
# the rest, "--dry-run" shows the sbatch submissions without submitting)
EXECUTOR ?= local
SWEEP_ARGS ?=
# 1: `make book` runs (resumes) the sweep first; 0: it builds from the results already in RUNS
SWEEP ?= 1

# The published logits (the CIFAR-10 ResNet-50 runs and Mukhoti et al.'s released networks): a local
# copy of the directory holding both folders wins over the download. It is looked for beside the
# project, then beside the repository this checkout was cloned from (a clone into /tmp has no
# ../shared of its own); an explicit FOCALCAL_LOGITS_ROOT wins over both.
ORIGIN := $(patsubst file://%,%,$(shell git config --get remote.origin.url 2>/dev/null))
LOGITS_CANDIDATES := $(abspath ../shared/data) \
                     $(if $(ORIGIN),$(abspath $(ORIGIN)/../shared/data))
SHARED_LOGITS := $(firstword $(foreach d,$(LOGITS_CANDIDATES),$(if $(wildcard $(d)/cifar10-resnet50-logits/ce_test.npz),$(d))))
ifneq ($(SHARED_LOGITS),)
export FOCALCAL_LOGITS_ROOT ?= $(SHARED_LOGITS)
endif
export PYTHONHASHSEED := 0

.PHONY: help install system-deps test test-fast lint-imports book calibrator-cache sweep results-present bench lab serve lock clean

help:
	@echo "make book    build the book into _build/html (runs the '$(PROFILE)' sweep first)"
	@echo "             PROFILE=cpu|gpu|paper RUNS=dir; SWEEP=0 builds from the results in RUNS"
	@echo "make sweep   run (resume) the '$(PROFILE)' sweep into $(RUNS) (EXECUTOR=local|slurm, JOBS=n)"
	@echo "make test    run the whole test suite"
	@echo "make bench   print the speed benchmarks"
	@echo "make lab     open the repository in JupyterLab (LAB_ARGS=... passes options)"
	@echo "make serve   serve the built book on http://localhost:$(PORT)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# pip (not uv/poetry): torch==2.14.1 and torchvision==0.29.1 come from this machine's disk.
# pyproject.toml states ranges; the book's environment is pinned by requirements/constraints.txt.
# book/_lib is the book's helpers (focalcal_book): installed here, never part of the wheel.
CONSTRAINTS := requirements/constraints.txt
$(STAMP): pyproject.toml book/_lib/pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[book,test]' -e book/_lib
	@touch $@

install: $(STAMP) system-deps

# Debian packages the book check, the offline Fashion-MNIST and the SLURM tests (a single-node
# cluster: munged, slurmctld, slurmd; tests/slurm_cluster.py) need; installed where the machine allows.
system-deps:
	@need=""; \
	command -v chromium >/dev/null 2>&1 || need="$$need chromium"; \
	[ -d /usr/share/datasets/fashion-mnist ] || need="$$need dataset-fashion-mnist"; \
	{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null 2>&1; } || need="$$need slurm-wlm"; \
	[ -x /usr/sbin/munged ] || need="$$need munge"; \
	if [ -n "$$need" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else SUDO=none; fi; \
	  if [ "$$SUDO" != none ]; then \
	    echo "installing Debian packages:$$need"; \
	    $$SUDO apt-get install -y -q $$need >/dev/null 2>&1 || { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q $$need >/dev/null; } \
	      || echo "warning: could not install$$need (the book check needs chromium, the SLURM tests slurm-wlm and munge; Fashion-MNIST falls back to torchvision)"; \
	  else echo "warning: cannot install$$need without root"; fi; \
	fi

# make test runs in one process: on 2 cores its sweeps, kernels and book build already keep both
# busy, and two test processes made it slower (30:02 of pytest against 27 min, fresh clones). make
# test-fast runs its unit tests in TEST_JOBS processes (pytest-xdist; tests/conftest.py keeps the
# files that share session fixtures in one of them).
TEST_JOBS ?= 2

# pytest exits 5 when it collected no test: that is a failure here, never a pass
test: install lint-imports
	@rc=0; $(BIN)/python -m pytest || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# unit tests only: skips the chapters, the book build, the sweeps and the packaging checks, and runs
# a few representative cases where the full suite checks a whole set (marker exhaustive: the fast
# focal-TS search against the exact one on 3 of the 17 released networks) (for development, not CI)
test-fast: install lint-imports
	$(BIN)/python -m pytest -n $(TEST_JOBS) -m "not book and not notebooks and not packaging and not exhaustive"

# the architecture contracts of pyproject.toml ([tool.importlinter])
lint-imports: install
	$(BIN)/lint-imports

sweep: install
	$(BIN)/python -m focalcal.lab.sweep --profile $(PROFILE) --out $(RUNS) --executor $(EXECUTOR) \
	  --jobs $(JOBS) $(SWEEP_ARGS)

# the results the book reads: the sweep's (SWEEP=1), or a folder of finished runs given as RUNS (SWEEP=0)
ifeq ($(SWEEP),0)
RESULTS_DEP := results-present
else
RESULTS_DEP := sweep
endif

results-present:
	@test -f $(RUNS)/results.csv || { echo "SWEEP=0: no $(RUNS)/results.csv; give RUNS=<folder of a finished sweep> (make sweep PROFILE=$(PROFILE) writes one)" >&2; exit 1; }

# jupyter-cache keys a chapter on its own cells: when the library changes, the cached outputs of
# the theory chapters would be stale, so the cache is dropped whenever src/focalcal/ is newer
CACHE_STAMP := _build/.jupyter_cache.stamp
$(CACHE_STAMP): $(shell find src/focalcal book/_lib/focalcal_book -name '*.py')
	rm -rf _build/.jupyter_cache
	@mkdir -p _build && touch $@

# --all makes Sphinx read every page again, so the experiment pages (execution_mode: force) always
# re-execute on the sweep's current results; the theory chapters come from the execution cache.
book: install $(RESULTS_DEP) $(CACHE_STAMP) calibrator-cache
	FOCALCAL_RUNS=$(abspath $(RUNS)) $(BIN)/jupyter-book build . --all -W -n --keep-going
	@echo
	@echo "The book is built. Open: file://$(abspath _build/html/index.html)"

# the per-network fits of "Which calibrator?" (every post-hoc method on every released and sweep network)
# and the released-network pages' rows: computed here, in JOBS processes, because cold they take longer
# than a book cell may run (and one process at a time inside the build); cached under
# _build/calibrator-cache and _build/released-cache by a digest of code and data, so a warm cache costs seconds
calibrator-cache: install $(RESULTS_DEP)
	PYTHONPATH=book/_lib $(BIN)/python -c "from focalcal_book.which_calibrator import warm; warm('$(abspath $(RUNS))', jobs=$(JOBS))"
	PYTHONPATH=book/_lib $(BIN)/python -c "from focalcal_book.released import warm; warm(jobs=$(JOBS))"

bench: install
	$(BIN)/python bench/run_all.py

# JupyterLab on the whole repository (the chapters in book/, the templates in notebooks/, src/);
# jupytext's server extension, installed with the lab extra, opens the MyST .md pages as notebooks.
# As root (the default in containers) Jupyter refuses to start without --allow-root, and on a Linux
# machine with no display it would start a text-mode browser in this terminal, so both are added
# here; LAB_ARGS passes anything else (LAB_ARGS="--port=8890 --IdentityProvider.token=abc").
lab: install
	@echo "make lab: installing JupyterLab (the 'dev' extra of pyproject.toml, versions pinned by $(CONSTRAINTS))"
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	@args=""; \
	if [ "$$(id -u)" = 0 ]; then args="--allow-root"; fi; \
	if [ "$$(uname -s)" = Linux ] && [ -z "$${DISPLAY:-}$${WAYLAND_DISPLAY:-}" ]; then args="$$args --no-browser"; fi; \
	echo "make lab: $(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" $$args $(LAB_ARGS)"; \
	exec $(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" $$args $(LAB_ARGS)

PORT ?= 8000
serve:
	@test -f _build/html/index.html || { echo "no book yet: run make book first" >&2; exit 1; }
	$(BIN)/python -m http.server $(PORT) --directory _build/html

# re-pin the book's environment after changing pyproject.toml
lock: install
	{ echo "# Exact versions of the book's environment (make installs with -c this file; pyproject.toml states ranges)."; \
	  echo "# Regenerate: make lock  (pip freeze of .venv, editable packages excluded)"; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^focalcal'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf _build .pytest_cache .hypothesis

# The README's two commands are `make demo` and `make test`; each sets up what it needs.
PYTHON ?= python3
VENV ?= .venv
# The CPU build, named exactly: an unpinned `torch` resolves to a multi-GB CUDA build.
# Elsewhere, point pip at PyTorch's CPU wheels: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH ?= torch==2.13.0+cpu
BIN := $(VENV)/bin
STAMP := $(VENV)/.torchport-installed
# `local` is the embedded default model (--llm local): the first set-up compiles
# llama-cpp-python (~8 min, needs a C/C++ compiler and cmake) and fetches 1.1 GB of model
# parts. EXTRAS=dev leaves it out; its tests then skip. `cluster` is Ray, for
# `torchport batch --executor ray` (~70 MB; without it those tests skip). `reference` is the
# CUDA-only libraries that also run on a CPU (bitsandbytes), for the reference run. `triton`
# is Triton's interpreter for the reference run of an original's kernels (~250 MB wheel;
# without it those tests skip, naming the extra). `mcp` is the SDK of `torchport mcp`.
# `docs` is MkDocs with the Material theme, for `make docs` and tests/test_docs_site.py.
# `browser` is Playwright, which drives Debian's chromium in the HTML report's test.
EXTRAS ?= dev,mcp,local,cluster,reference,triton,docs,browser
# llama.cpp compiled for the build machine's CPU (its default) uses AMX tile kernels on
# CPUs that have them, and those fault on the virtual machines here (see
# scripts/ensure-portable-llama): build it for AVX2 instead, which every x86-64 CPU
# of the last decade runs. Elsewhere llama.cpp's own defaults.
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
endif

.PHONY: setup demo test test-fast lint docs bench sandbox-tools torch-tpu-wheel browser

# The native emulator (sandbox/native, a C++ PrivateUse1 backend, about a
# minute of CPU) is compiled into ~/.cache/torchport/emulator at set-up; without a C++
# compiler and ninja, emulated runs use the Python emulator and say why.
setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH)"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python scripts/ensure-portable-llama
	$(BIN)/python -m torchport.sandbox.native.build || echo "the Python emulator will be used (see: torchport doctor)"
	touch $(STAMP)

# The main job on the bundled CUDA example, offline: what ties it to CUDA, then the
# migrated copy for TorchTPU (out/cuda_mnist-tpu, with torchport-report/ inside),
# verified: the original on the CUDA reference shim, the migration on the emulated tpu.
demo: $(STAMP)
	$(BIN)/torchport scan examples/cuda_mnist --target tpu --exit-zero
	$(BIN)/torchport migrate examples/cuda_mnist --target tpu --out out/cuda_mnist-tpu --exit-zero
	@echo "the whole report as one page: out/cuda_mnist-tpu/torchport-report/index.html; diff: out/cuda_mnist-tpu/torchport-report/changes.patch; evidence: out/cuda_mnist-tpu/torchport-report/verification.md; still for a human: out/cuda_mnist-tpu/torchport-report/manual.md"

# Isolation backends for the sandbox tests: bubblewrap, and docker unless
# TORCHPORT_WITH_DOCKER=0. Installs only as root with apt-get; otherwise says what is
# missing, and the tests of an absent backend skip with that reason.
TORCHPORT_WITH_DOCKER ?= 1
sandbox-tools: $(STAMP)
	@TORCHPORT_WITH_DOCKER=$(TORCHPORT_WITH_DOCKER) PYTHON=$(BIN)/python scripts/ensure-sandbox-tools

# The suite runs in parallel (pytest-xdist). Most tests wait on the programs they start
# (sandboxed runs, a CLI in a pseudo-terminal, a model server), so more workers than cores
# keep both cores busy. `--dist loadgroup`: tests/xdist_groups.py puts the tests of a
# module-scoped fixture on the worker that builds it once (tests/test_xdist_groups.py
# checks that it still does).
TEST_WORKERS ?= 4
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup --durations=15

# The torch-tpu wheel (96 MB), the oracle of tests/test_torchtpu_conformance.py: fetched once
# into $TORCHPORT_HOME/torch-tpu (default ~/.cache/torchport/torch-tpu) and checked against the
# sha256 in sandbox/data/torch_tpu.toml, offline after that. Never imported. Where the registry
# cannot be reached, those tests skip, naming the file.
torch-tpu-wheel: $(STAMP)
	@$(BIN)/python scripts/fetch-torch-tpu || echo "the TorchTPU conformance tests will skip (see above)"

# Debian's chromium for the HTML report's browser test (root + apt-get; otherwise it says
# what is missing and that test skips, naming it).
browser: $(STAMP)
	@PYTHON=$(BIN)/python scripts/ensure-browser

# ruff and mypy gate the suite: `make test` (and so CI) fails on a lint, format or type
# finding first.
test: $(STAMP) lint sandbox-tools torch-tpu-wheel browser
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# The developer's loop: everything not marked slow (no model server, no corpus runs).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

# scripts/typecheck: mypy over the product packages ([tool.mypy] in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/python scripts/typecheck

# The documentation site (mkdocs.yml, docs/) into site/, git-ignored: open site/index.html.
# --strict with mkdocs.yml's validation settings fails on a broken link or anchor, an
# absolute link or a page missing from the nav; tests/test_docs_site.py builds it the same
# way. NO_MKDOCS_2_WARNING silences the Material theme's banner about its successor, which
# is not a warning about these pages.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

# TorchFix pins an older libcst, so it lives in a venv of its own.
.venv-bench/bin/torchfix:
	$(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install --quiet --disable-pip-version-check torchfix==0.7.0

# Each figure is a ratio against a baseline measured in the same run (these machines are
# noisy): scan and migrate lines/s against libcst's parse (with the engine's metadata) of
# the same files, the emulators' step time against plain CPU, a verification's sandbox
# start-up against `python -c "import torch"`, batch throughput against one job.
bench: $(STAMP) .venv-bench/bin/torchfix
	$(BIN)/python benchmarks/scan_speed.py --torchfix .venv-bench/bin/torchfix
	$(BIN)/python benchmarks/migrate_speed.py
	$(BIN)/python benchmarks/emulator_overhead.py --repeats 3
	$(BIN)/python benchmarks/verify_phases.py
	$(BIN)/python benchmarks/batch_throughput.py

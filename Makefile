# debugtune: `make demo` and `make test` each set everything up first (idempotent).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.debugtune-installed
TORCH_PIN ?= torch==2.13.0
export OPENBLAS_NUM_THREADS ?= 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: install demo test bench lint typecheck clean dashboard-assets

install: $(STAMP)

$(STAMP): pyproject.toml CMakeLists.txt $(wildcard native/src/*.cpp native/src/*.h)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_PIN)"
	$(BIN)/python -m pip install --quiet -e ".[dev,torch]"
	$(BIN)/python tools/package_tree.py  # build/typecheck: the package as installed, for mypy, pyright, editors
	@touch $@

demo: install
	$(BIN)/cann-debug demo

# Two workers, each test module on one (its module fixtures set up once); the quick benchmark trains once per worker.
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

BENCH_STAMP := $(VENV)/.debugtune-bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,torch,bench]"
	$(BIN)/python -m pip install --quiet --no-deps traceinsight  # HTA, the trace-import peer (its full deps pull jupyterlab)
	@touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

# The dashboard's SPARQL editor (YASGUI, MIT) from npm into debugtune/static/yasgui; the output is committed,
# so install and CI need no npm (docs/report.md).
dashboard-assets:
	cd dashboard && npm ci --ignore-scripts --no-audit --no-fund && node build.mjs

lint: install
	$(BIN)/ruff check .

# mypy (strict for kg/ query/ native/ engine/telemetry/) and pyright's import resolution, over build/typecheck
typecheck: install
	$(BIN)/python tools/typecheck.py

clean:
	rm -rf build $(VENV) .pytest_cache

# raylab: two commands.
#   make lab    install everything into .venv and start JupyterLab with raylab (local backend)
#   make test   install everything and run every check: lint, types, frontend, Python tests
# Each step is remade only when its inputs changed, so a second run is quick.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
WHEEL  := dist/raylab-$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)-py3-none-any.whl
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Browser tests use Debian's Chromium; never download one.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: lab test lint typecheck pytest sysdeps harness bench clean
.DELETE_ON_ERROR:

lab: $(BIN)/.raylab-installed
	$(BIN)/jupyter lab $(ROOT_FLAG) examples/quickstart.ipynb

test: lint typecheck pytest

# --- installation --------------------------------------------------------------

# System packages the tests drive for real: Chromium (browser tests), iproute2 (an
# isolated network namespace with only loopback for the Ray tests).
sysdeps:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $$missing; \
	  else echo "please install:$$missing (e.g. sudo apt-get install$$missing)"; exit 1; fi; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Build tools and every runtime/dev dependency (from pyproject.toml), without raylab itself.
$(BIN)/.deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q hatchling hatch-jupyter-builder "jupyter-builder>=1.3" \
	  $$($(BIN)/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(" ".join(repr(d) for d in p["dependencies"] + p["optional-dependencies"]["dev"]))' | tr -d "'")
	touch $@

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

raylab/labextension/package.json: node_modules/.package-lock.json $(BIN)/.deps $(shell find labextension/src labextension/style -type f) tsconfig.json
	npm run build:prod

$(WHEEL): raylab/labextension/package.json $(shell find raylab -name '*.py') pyproject.toml install.json jupyter-config/server-config/raylab.json README.md
	rm -f dist/raylab-*.whl
	$(BIN)/pip wheel -q --no-deps --no-build-isolation -w dist .

# The product is installed from the wheel, as users get it: the prebuilt labextension
# and the auto-enabled server extension come from its data files.
$(BIN)/.raylab-installed: $(WHEEL) $(BIN)/.deps
	$(BIN)/pip install -q --no-deps --force-reinstall $(WHEEL)
	touch $@

harness:
	tests/kubernetes/harness/build.sh

# What exported projects install in their tests, fetched while the network is here (the
# tests' namespace reaches no index): tests/export/wheelhouse.py says what and why.
WHEELHOUSE := .cache/wheelhouse
$(WHEELHOUSE)/.complete: $(BIN)/.raylab-installed tests/export/wheelhouse.py $(wildcard tests/export/notebooks/*.ipynb)
	$(BIN)/python tests/export/wheelhouse.py $(WHEELHOUSE)

# --- checks --------------------------------------------------------------------

lint: $(BIN)/.deps node_modules/.package-lock.json
	$(BIN)/ruff check raylab tests bench
	$(BIN)/ruff format --check raylab tests bench
	$(BIN)/deptry raylab
	npm run lint:check

typecheck: $(BIN)/.deps
	$(BIN)/mypy

# Ray and Jupyter run inside a network namespace of their own holding only loopback
# (where the machine allows one), so the tests reach nothing but 127.0.0.1.
pytest: sysdeps harness $(BIN)/.raylab-installed $(WHEELHOUSE)/.complete
	tests/netns.sh $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(BIN)/.raylab-installed
	tests/netns.sh $(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf dist raylab/labextension labextension/lib $(VENV) node_modules .cache

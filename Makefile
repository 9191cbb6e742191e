# lifeboatcache: every target installs what it needs from a clean clone.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Every package of the repository (DESIGN §2); new plugin packages are picked up automatically.
MEMBERS := lifeboatcache_core $(patsubst %/pyproject.toml,%,$(wildcard backends/*/pyproject.toml manifests/*/pyproject.toml codecs/*/pyproject.toml policies/*/pyproject.toml adapters/*/pyproject.toml)) .
STAMP := $(VENV)/.setup-stamp
# pytest-xdist workers for `make test` (CI's box has 2 cores): the engine tests in one worker, the other
# files shared out whole (tests/scheduling.py says why and how). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
TEST_REQS := requirements-test.txt $(wildcard */*/requirements-test.txt)
SETUP_INPUTS := Makefile pyproject.toml setup.py lifeboatcache_core/pyproject.toml $(wildcard */*/pyproject.toml) \
	$(wildcard */*/setup.py) $(wildcard */*/src/*/*.c) $(wildcard .ci/setup.d/*.sh) $(TEST_REQS)

.PHONY: setup demo test test-fast bench lint clean

setup: $(STAMP)

$(STAMP): $(SETUP_INPUTS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	for script in $(sort $(wildcard .ci/setup.d/*.sh)); do VENV=$(VENV) bash $$script || exit 1; done
	$(PIP) install -q $(foreach r,$(TEST_REQS),-r $(r)) $(foreach m,$(MEMBERS),-e $(m))
	touch $(STAMP)

demo: setup
	$(PY) -m lifeboatcache demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=20 $(XDIST)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(XDIST)

bench: setup
	$(PY) -m lifeboatcache bench tiers

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# tenon: every target sets itself up; a fresh clone needs only Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup test lint schemas docs bench chaos fuzz run clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	PYTHONWARNINGS=ignore $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $@

setup: $(STAMP)

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check tenon proto devtools tests bench
	$(VENV)/bin/ruff format --check tenon proto devtools tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

schemas: setup
	$(PY) -m proto.export

docs: setup
	$(PY) -m devtools.docs

bench: setup
	$(PY) -m bench $(BENCH_ARGS)

# 10 minutes of churn while services, their replicas and broker nodes are SIGKILLed (not in CI); prints a table
chaos: setup
	$(PY) -m bench.chaos $(CHAOS_ARGS)

# the property tests of tests/trust with a long budget, objects' shapes broken too (make test runs a few seconds)
fuzz: setup
	TENON_FUZZ_PROFILE=long TENON_FUZZ_SHAPES=1 $(PY) -m pytest -q tests/trust/test_fuzz_codec.py \
		tests/trust/test_fuzz_deciders.py $(PYTEST_ARGS)

run: setup
	$(VENV)/bin/tenon up

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# privgate — everything installs itself: `make demo`, `make test`, `make bench` from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# pytest workers; the suite is written for 2 cores
WORKERS ?= 2

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	@bash examples/demo.sh $(VENV)

test: install
	$(PY) -m pytest -n $(WORKERS) -q tests

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) privgate-reports .privgate-cache .pytest_cache

# privgate — everything installs itself: `make demo`, `make test`, `make bench` (`make bench-quick`) from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# `make demo` installs only what the demo runs (the runtime, the examples' tables, skops and the language-model
# packages: the `demo` extra); `make test` adds the test extra and the MLServer venv on top of it
DEMO_STAMP := $(VENV)/.demo-stamp
# MLServer (the real inference server the endpoint tests start) pins fastapi < 0.116 while flwr pins 0.138:
# it lives in its own venv, with the scikit-learn of .venv so the models the tests save load there unchanged.
SERVE_VENV  ?= .venv-serve
SERVE_STAMP := $(SERVE_VENV)/.installed-stamp
# pytest workers; the suite is written for 2 cores
WORKERS ?= 2

.PHONY: install demo test test-gpu lint format bench bench-quick clean

# pip installs torch (and uv): it finds the CPU build where pip's own configuration names local wheels or indexes, which
# uv does not read (it would take PyPI's CUDA build). uv then installs the rest in parallel; where uv fails, pip does.
# Neither writes bytecode (compiling all of site-packages costs ~90 CPU-seconds, the demo imports a fraction of it):
# the demo keeps what it imports in $(VENV)/pycache (examples/demo.sh), `make test` compiles everything once.
$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile -c constraints.txt torch==2.13.0 uv
	$(VENV)/bin/uv pip install -q --python $(PY) -c constraints.txt -e '.[demo]' \
	  || $(PY) -m pip install -q --no-compile -c constraints.txt -e '.[demo]'
	touch $(DEMO_STAMP)

# `make test` then compiles the bytecode of everything, in parallel, as the suite starts many interpreters (an
# optimisation only, so its errors are ignored: some packages ship files that are not Python 3 on purpose)
$(STAMP): $(DEMO_STAMP)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	-$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null
	touch $(STAMP)

$(SERVE_STAMP): $(STAMP)
	test -x $(SERVE_VENV)/bin/python || $(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q --upgrade pip
	$(SERVE_VENV)/bin/python -m pip install -q "mlserver==1.7.1" "mlserver-sklearn==1.7.1" \
	  "scikit-learn==$$($(PY) -c 'import sklearn; print(sklearn.__version__)')"
	touch $(SERVE_STAMP)

install: $(STAMP) $(SERVE_STAMP)

demo: $(DEMO_STAMP)
	@bash examples/demo.sh $(VENV)

# then a sample of the CLI tests again with every run in a fresh interpreter, what the suite's fork servers could
# hide (tests/cli_fork.py, docs/contributing.md): a check writing every format and its report rendered, a bad
# input, a harden refusal; about 20 CPU-seconds (18-23 measured), 7 of them pytest's start
FRESH_SAMPLE := tests/test_hostile_files.py::test_report_render_reads_no_path_and_runs_no_script \
  tests/test_bad_input.py::test_missing_model tests/test_io_safety.py::test_harden_outputs_are_checked_before_any_work

# PYTHONDONTWRITEBYTECODE is cleared for the suite: with it set, every worker, every pytester run and every fresh
# interpreter the tests start (Ray workers, the fresh CLI sample) recompiles privgate and re-rewrites the test
# modules' asserts (about 10 CPU-seconds per worker's collection, measured); the bytecode goes to the ignored __pycache__/
# The fresh sample runs beside the suite, not after it (one process: it would leave a core idle for its ~20 s); its
# output comes after the suite's, and either one failing fails the target.
test: install
	@log=$$(mktemp); trap 'kill $$fresh 2>/dev/null; rm -f $$log; exit 130' INT TERM; \
	echo "PRIVGATE_TEST_FRESH_CLI=1 $(PY) -m pytest -q -p no:cacheprovider $(FRESH_SAMPLE) (beside the suite)"; \
	PYTHONDONTWRITEBYTECODE= PRIVGATE_TEST_FRESH_CLI=1 $(PY) -m pytest -q -p no:cacheprovider $(FRESH_SAMPLE) \
	  >$$log 2>&1 & fresh=$$!; \
	echo '$(PY) -m pytest -n $(WORKERS) --dist worksteal -q -m "not lint" tests'; \
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(WORKERS) --dist worksteal -q -m "not lint" tests; suite=$$?; \
	wait $$fresh; sample=$$?; echo "the fresh-interpreter sample:"; cat $$log; rm -f $$log; \
	test $$suite -eq 0 && test $$sample -eq 0

# the whole suite on a CUDA GPU: every CLI run with --device cuda ($$PRIVGATE_DEVICE), every in-process run on
# `auto`; stops at once, in one sentence, where torch sees no GPU (tests/conftest.py). Needs a CUDA build of torch.
test-gpu: install
	PRIVGATE_DEVICE=cuda $(PY) -m pytest -n $(WORKERS) --dist worksteal -q -m "not lint" tests

# ruff: lint and formatting (configured in pyproject.toml); `make format` rewrites, `make lint` only checks.
# lint-imports: the layer contract ([tool.importlinter] in pyproject.toml), imports inside functions included.
# mkdocs: the documentation site (mkdocs.yml, docs/) built strictly: a broken link or anchor, or a page missing from
# nav, fails (NO_MKDOCS_2_WARNING quiets Material's banner about its successor; the site goes to site/, ignored).
lint: install
	$(VENV)/bin/ruff check privgate pytest_privgate tests benchmarks examples
	$(VENV)/bin/ruff format --check privgate pytest_privgate tests benchmarks examples
	$(VENV)/bin/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
	$(PY) -m pytest -q -p no:cacheprovider -m lint tests

format: install
	$(VENV)/bin/ruff check --fix privgate pytest_privgate tests benchmarks examples
	$(VENV)/bin/ruff format privgate pytest_privgate tests benchmarks examples

# benchmarks/README.md: what each benchmark needs and takes. `make bench` runs every one (hours; it installs the
# `bench` extra, IBM ART, for benchmarks/peers/); `make bench-quick` a few CPU ones at small settings (a few minutes).
bench: install
	$(PY) -m pip install -q -c constraints.txt -e '.[bench]'
	$(PY) benchmarks/run_all.py

bench-quick: install
	$(PY) benchmarks/run_all.py --quick

clean:
	rm -rf $(VENV) $(SERVE_VENV) .venv-ray-newest privgate-reports .privgate-cache .pytest_cache site

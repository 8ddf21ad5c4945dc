# The two commands a fresh machine needs (Python 3.11 + make):  make demo  /  make test
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check
# One stamp per extra set, each re-installed only when the project metadata changes (idempotent):
# `make demo` installs the runtime and the JAX extra (what the example projects run); `make test` adds the dev
# extra (hypothesis, ruff, import-linter, the server's packages, torch for the parity tests ...).
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test test-clients test-ray test-multihost lint bench clean venv docs docs-build docs-tables screenshots

venv: $(TEST_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[jax]'
	@touch $@

# The dev extra contains the jax extra: a test install is a demo install too.
$(TEST_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[dev]'
	@touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

test: $(TEST_STAMP)
	$(PY) -m pytest -n 2 tests
	$(PY) -m ruff check pytest_reward tests bench examples
	$(VENV)/bin/lint-imports

# The contract tests against real trainer clients (OpenRLHF, verl, reward-kit), installed from the package
# registry into ~/.cache/pytest-reward/clients; deselected in `make test`. A failed install fails, never skips.
test-clients: $(TEST_STAMP)
	PYTEST_REWARD_CLIENTS=1 $(PY) -m pytest -m clients tests/deploy

# --reward-executor ray's tests (a local Ray, pytest-xdist workers sharing it, a two-node cluster losing a node):
# the ray extra (~240 MB) on top of the test install; deselected in `make test` (marker ray). Every Ray process
# listens on 127.0.0.1 only and is killed by PID afterwards.
RAY_STAMP := $(VENV)/.installed-ray
$(RAY_STAMP): pyproject.toml | $(TEST_STAMP)
	$(PIP) -e '.[dev,ray]'
	@touch $@

test-ray: $(TEST_STAMP) $(RAY_STAMP)
	$(PY) -m pytest -m ray tests/test_executors_ray.py tests/deploy/test_adapter_processes.py

# Evaluations and pytest runs under jax.distributed: two real processes per test (coordinator on 127.0.0.1, a free
# port, two CPU devices each), about 2 minutes; deselected in `make test` (marker multihost). Every process is
# killed by process group afterwards.
test-multihost: $(TEST_STAMP)
	$(PY) -m pytest -m multihost tests/multihost

lint: $(TEST_STAMP)
	$(PY) -m ruff check pytest_reward tests bench examples
	$(VENV)/bin/lint-imports

# The documentation site (mkdocs-material, the dev extra): served on 127.0.0.1:8000 with live reload, or built
# --strict into build/site (tests/test_docs_site.py builds it in `make test` too; every page's examples run in
# tests/test_docs_examples.py).
docs: $(TEST_STAMP)
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

docs-build: $(TEST_STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

# The reference pages' generated tables (options, marker keys), rewritten from the declarations.
docs-tables: $(TEST_STAMP)
	$(PY) docs/generate_tables.py

# The docs' pictures (docs/images/*.png), taken by the headless-browser tests of the HTML report (needs chromium).
screenshots: $(TEST_STAMP)
	PYTEST_REWARD_SCREENSHOTS=docs/images $(PY) -m pytest -p no:cacheprovider tests/test_report_html.py -k chromium

bench: $(TEST_STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .reward

# The two commands a fresh machine needs (Python 3.11 + make):  make demo  /  make test
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-clients lint bench clean venv

venv: $(STAMP)

# Re-install only when the project metadata changes (idempotent).
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -n 2 tests
	$(PY) -m ruff check pytest_reward tests bench examples
	$(VENV)/bin/lint-imports

# The contract tests against real trainer clients (OpenRLHF, verl, reward-kit), installed from the package
# registry into ~/.cache/pytest-reward/clients; deselected in `make test`. A failed install fails, never skips.
test-clients: $(STAMP)
	PYTEST_REWARD_CLIENTS=1 $(PY) -m pytest -m clients tests/deploy

lint: $(STAMP)
	$(PY) -m ruff check pytest_reward tests bench examples
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .reward

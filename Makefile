# The book's commands. Each target sets up the pinned environment in .venv first (once: a stamp
# file makes later runs instant, until requirements-lock.txt or pyproject.toml changes).
#
#   make book      execute every chapter and build the HTML book in _build/html (warnings are errors)
#   make test      unit tests of lib, then execute every chapter as a notebook (nbmake)
#   make student   the student version of every chapter in _build/student (solutions stripped)
#   make lint      ruff over the Python code
#   make bench     time the library and the chapters
#   make clean     remove build outputs (keeps .venv)
#   make lock      regenerate requirements-lock.txt from the ranges in pyproject.toml

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NBTEST := .nbtest
# Notebooks run in kernels started from the venv (the kernelspec's "python" is looked up on PATH).
RUN := PATH="$(CURDIR)/$(BIN):$$PATH"

.PHONY: help venv setup test book student lint bench clean lock

help:
	@sed -n 's/^#   make /make /p' Makefile

venv setup: $(STAMP)

$(STAMP): requirements-lock.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --progress-bar off -q -r requirements-lock.txt
	$(BIN)/pip install --progress-bar off -q --no-deps --no-build-isolation -e .
	touch $@

test: $(STAMP)
	$(BIN)/python -m pytest tests -q
	rm -rf $(NBTEST)
	mkdir -p $(NBTEST)
	for src in $$($(BIN)/python tools/chapters.py --notebooks); do \
	  name=$$(basename "$${src%.*}"); \
	  $(BIN)/jupytext --quiet --to ipynb --output "$(NBTEST)/$$name.ipynb" "$$src"; \
	done
	# nbmake skips every path with a "_build" part, hence the scratch folder .nbtest
	if compgen -G "$(NBTEST)/*.ipynb" > /dev/null; then \
	  BOOK_MODE=test $(RUN) $(BIN)/python -m pytest --nbmake --nbmake-timeout=300 -q $(NBTEST)/*.ipynb; \
	else \
	  echo "no chapters with code listed in _toc.yml"; \
	fi

book: $(STAMP)
	BOOK_MODE=build $(RUN) $(BIN)/jupyter-book build . -W --keep-going
	@echo "The book is in _build/html/index.html"

student: $(STAMP)
	$(BIN)/python tools/make_student.py

lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks tools

bench: $(STAMP)
	$(RUN) $(BIN)/python benchmarks/run.py

clean:
	rm -rf _build $(NBTEST) .pytest_cache .ruff_cache .benchmarks .lockvenv *.egg-info
	find lib tests tools benchmarks -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true

# Resolve the ranges of pyproject.toml afresh in a throw-away venv and pin what comes out. torch is
# installed first at the version on this machine's disk (the CPU build; "+cpu" is dropped from the
# pin, so the lock also installs elsewhere, where PyPI's 2.13.0 is taken).
TORCH := 2.13.0
lock:
	rm -rf .lockvenv
	$(PYTHON) -m venv .lockvenv
	.lockvenv/bin/pip install --progress-bar off -q torch==$(TORCH) setuptools
	.lockvenv/bin/pip install --progress-bar off -q -e '.[book,test]'
	{ echo "# Exact versions that \`make\` installs (regenerate with \`make lock\`)."; \
	  echo "# Python $$(.lockvenv/bin/python -c 'import platform; print(platform.python_version())'), made by pip freeze."; \
	  .lockvenv/bin/pip freeze --all --exclude-editable --exclude pip | sed -e 's/^torch==\(.*\)+cpu$$/torch==\1/'; \
	} > requirements-lock.txt
	rm -rf .lockvenv

# The book's commands. Each target sets up the pinned environment in .venv first (once: a stamp
# file makes later runs instant, until requirements-lock.txt or pyproject.toml changes).
#
#   make book      build the HTML book in _build/html, executing its pages two at a time (BOOK_JOBS; all from a clean tree; else the changed ones)
#   make pdf       build the book, then print it as one PDF, _build/html/book.pdf (the footer's PDF link)
#   make site-test build the book and its PDF, then test it offline in headless Chromium (screenshots in _build/site-test)
#   make test      unit tests of lib, then execute every chapter as a notebook (nbmake), unless make book recorded these sources
#   make test-grading  the grading tests alone: every assignment graded in sandboxes, hostile submissions
#   make check-results the committed long-run results against the code (one sampled task per file recomputed)
#   make test-portable  the unit tests under portable kernels and two threads (as other machines)
#   make full      execute every chapter at BOOK_SCALE=full (the larger settings), with timings
#   make student   the assignments' student notebooks and autograder bundles in _build/student
#   make grade     grade every .ipynb in SUBMISSIONS=<folder>, each in a sandbox: <folder>/grades.csv
#   make lint      ruff over the Python code
#   make bench     time the chapters (default and full scale) and the library's hot paths
#   make ledger    execute every chapter and commit what it reproduces to book/results/ledger.json
#   make reproduce recompute the committed long-run results book/results/*.json (CHAPTERS=... for some;
#                  on a Dask cluster with BOOK_DASK_SCHEDULER=...; SCALING=<chapter> times 1, 2, 4 workers)
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
LEDGER_DIR := _build/ledger
# Notebooks run in kernels started from the venv (the kernelspec's "python" is looked up on PATH).
RUN := PATH="$(CURDIR)/$(BIN):$$PATH"
# The chapters' matplotlib keeps its font list in the venv: a list cached by another installation
# (whose font files were gone) made every figure with math print "findfont" lines on the pages.
MPL := MPLCONFIGDIR="$(CURDIR)/$(VENV)/mplconfig"

.PHONY: help venv setup system-packages vendor test test-grading check-results test-portable full book pdf site-test student grade lint bench ledger reproduce clean lock

help:
	@sed -n 's/^#   make /make /p' Makefile

venv setup: $(STAMP)

# Debian's packages the tools use (bubblewrap and python3-seccomp for the grading sandbox,
# chromium for the site test and the PDF), installed in one apt-get call when missing and root
# (tools/system_packages.py). Each tool would install its own when it first needs it; CI runs this
# first, because its steps run in parallel and two apt-get installs at once contend for dpkg's lock.
system-packages:
	$(PYTHON) tools/system_packages.py

$(STAMP): requirements-lock.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --progress-bar off -q -r requirements-lock.txt
	$(BIN)/pip install --progress-bar off -q --no-deps --no-build-isolation -e .
	touch $@

# Convert every chapter listed in _toc.yml into the scratch folder .nbtest and execute it with
# nbmake (which skips every path with a "_build" part, hence the scratch folder). $(1): the
# timeout of a cell in seconds.
define run-chapters
rm -rf $(NBTEST) $(LEDGER_DIR) $(EXECUTED)
mkdir -p $(NBTEST)
for src in $$($(BIN)/python tools/chapters.py --notebooks); do \
  name=$$(basename "$${src%.*}"); \
  $(BIN)/jupytext --quiet --to ipynb --output "$(NBTEST)/$$name.ipynb" "$$src"; \
done
if compgen -G "$(NBTEST)/*.ipynb" > /dev/null; then \
  BOOK_MODE=test $(RUN) $(MPL) $(BIN)/python -m pytest --nbmake --nbmake-timeout=$(1) -q \
    --durations=0 -p no:cacheprovider $(NBTEST)/*.ipynb; \
else \
  echo "no chapters with code listed in _toc.yml"; \
fi
endef

# make book leaves _build/.executed holding the hash of the sources it built from (SOURCES_HASH:
# the book, lib, tools, benchmarks, the configuration and the lock, at BOOK_SCALE). When make test
# finds the same hash, it executes no chapter: the skip is all or nothing. After a clean build
# (CI's: .ci/run builds the book first for this reason) the book build ran every chapter with
# errors fatal, in the mode that renders every exploration frame (a superset of nbmake's one
# frame), and wrote the ledger entries that `tools/ledger.py check` reads. An incremental make book
# executes only the pages whose book/*.md changed (Sphinx tracks no dependency on lib), so it writes
# no hash: tools/book_reads.py leaves $(READ_EVERY_PAGE) only when the build read every page, and
# after any other build make test executes every chapter. The hash is written only once the ledger
# check has passed, so a build whose check fails is executed again.
EXECUTED := _build/.executed
READ_EVERY_PAGE := _build/.read-every-page
SOURCES_HASH = { git ls-files -co --exclude-standard -z -- book lib tools benchmarks _config.yml \
  _toc.yml requirements-lock.txt pyproject.toml | sort -z | xargs -0 sha256sum; \
  echo "scale=$${BOOK_SCALE:-}"; } 2>/dev/null | sha256sum | cut -c1-64
SAME_SOURCES = $(shell test -f $(EXECUTED) && git rev-parse --git-dir >/dev/null 2>&1 \
  && test "$$(cat $(EXECUTED))" = "$$($(SOURCES_HASH))" && echo yes)

# The unit tests in two processes (pytest-xdist); then the grading tests (make test-grading) and
# the other tests marked "not_numerics" (the browser, the built site's notebooks), which start
# sandboxes and browsers of their own, one test at a time; the chapters; the ledger; the committed
# results. BESIDE_BOOK=1 (set by .ci/run only, which runs make test-grading and make check-results
# beside the book build, from the same tree) leaves those two out.
test: $(STAMP)
	$(BIN)/python -m pytest tests -q -n 2 -m "not not_numerics"
	$(if $(BESIDE_BOOK),@echo "the grading tests ran beside the book build (.ci/run)",$(MAKE) --no-print-directory test-grading)
	$(BIN)/python -m pytest tests -q -m not_numerics $(addprefix --ignore=,$(GRADING_TESTS))
	$(if $(SAME_SOURCES),@echo "every chapter was executed by make book from these sources ($(EXECUTED)); not again",$(call run-chapters,300))
	$(BIN)/python tools/ledger.py check
	$(if $(BESIDE_BOOK),@echo "the committed results were checked beside the book build (.ci/run)",$(RESULTS_CHECK))

# The grading tests (tests/test_assignments.py, tests/test_grading_*.py): every assignment's
# solution, blank and wrong notebooks graded in sandboxes, hostile and colluding submissions, the
# sandbox's limits. Most of their time is waiting: for the time limits that hostile notebooks run
# into, and for sandboxes that may not run beside each other (tools/grading.py, _Turns). Measured
# in one process: 361 CPU-seconds in all (sandboxes included), against 585 s of wall time when
# they last ran alone (with the browser tests): under two thirds of one core. So they run in two
# processes, a file each (--dist loadfile keeps a file's graded folders, module fixtures, in one
# process); they need no built book, and CI runs them beside the book build, at a lower priority. tests/test_grading_chapters.py is not one of them: it searches the
# built pages too, so it runs with the other tests marked not_numerics, after the book.
GRADING_TESTS := tests/test_assignments.py \
  $(filter-out tests/test_grading_chapters.py,$(sort $(wildcard tests/test_grading_*.py)))
test-grading: $(STAMP)
	$(BIN)/python -m pytest $(GRADING_TESTS) -q -n 2 --dist loadfile -p no:cacheprovider \
	  -m not_numerics --durations=10

# The committed long-run results (book/results/*.json, make reproduce) against the code: every
# task's digest and every derived number, then one randomly chosen task per file that costs at
# most 20 s recomputed (benchmarks/reproduce.py --check; the seed is printed, so a failure can be
# rerun with --seed). A number edited by hand, or one the code no longer computes, names its file
# and task.
RESULTS_CHECK = $(RUN) $(BIN)/python benchmarks/reproduce.py --check --sample 1 --budget 20
check-results: $(STAMP)
	$(RESULTS_CHECK)

# The reproductions ledger (lib/book/ledger.py): every chapter records the papers' numbers it recomputes
# into $(LEDGER_DIR) as it executes; `make ledger` commits them, `make test` and `make book` check
# their own run against the committed file.
ledger: $(STAMP)
	$(call run-chapters,300)
	$(BIN)/python tools/ledger.py write

# Every chapter at BOOK_SCALE=full (the two chapters with a larger setting use it), with each
# chapter's time (not in CI; make bench prints both scales side by side).
full: export BOOK_SCALE = full
full: $(STAMP)
	$(call run-chapters,1800)

# MathJax 3 without npm: the PyPI wheel django-static-mathjax 3.2.2.1 carries MathJax 3.2.2's es5
# build. The venv's pip downloads it (its sha256 is checked, so every build serves the same
# files), and only the files that the pages load are copied into the git-ignored
# .vendor/static/mathjax/, which Sphinx copies into the book's _static/ (html_static_path and
# mathjax_path in _config.yml): math is typeset without a network. Those files are tex-chtml.js,
# the TeX extensions that the chapters' TeX makes MathJax autoload (MATHJAX_EXTENSIONS: a page
# that requests one not listed fails `make site-test`, which names it; add it here), every CHTML
# woff-v2 font (which fonts a page requests depends on the glyphs it draws, so all 23 are shipped)
# and MathJax's licence: 26 files, 1.6 MB of the 24 MB distribution.
MATHJAX_VERSION := 3.2.2.1
MATHJAX_WHEEL := django_static_mathjax-$(MATHJAX_VERSION)-py3-none-any.whl
MATHJAX_SHA256 := 05ad109fd9e5d9d380c76389689b7f523e9ccb7f7a85c1eb962c7564eac7601d
# boldsymbol is autoloaded when a page uses \boldsymbol; mathtools is loaded by every page
# (mathjax3_config in _config.yml: tex-chtml.js does not autoload it).
MATHJAX_EXTENSIONS := boldsymbol mathtools
MATHJAX_ES5 := .vendor/tmp/wheel/mathjax/static/mathjax/es5
empty :=
space := $(empty) $(empty)
MATHJAX := .vendor/static/mathjax/.files-$(MATHJAX_VERSION)-$(subst $(space),-,$(strip $(MATHJAX_EXTENSIONS)))
vendor: $(MATHJAX)
$(MATHJAX): | $(STAMP)
	rm -rf .vendor/static/mathjax .vendor/tmp
	mkdir -p .vendor/tmp .vendor/static/mathjax/input/tex/extensions .vendor/static/mathjax/output/chtml/fonts
	$(BIN)/pip download --quiet --progress-bar off --no-deps --dest .vendor/tmp django-static-mathjax==$(MATHJAX_VERSION)
	echo "$(MATHJAX_SHA256)  .vendor/tmp/$(MATHJAX_WHEEL)" | sha256sum --check --quiet
	$(BIN)/python -m zipfile -e .vendor/tmp/$(MATHJAX_WHEEL) .vendor/tmp/wheel
	cp $(MATHJAX_ES5)/tex-chtml.js $(MATHJAX_ES5)/../LICENSE .vendor/static/mathjax/
	cp -r $(MATHJAX_ES5)/output/chtml/fonts/woff-v2 .vendor/static/mathjax/output/chtml/fonts/
	for name in $(MATHJAX_EXTENSIONS); do \
	  cp $(MATHJAX_ES5)/input/tex/extensions/$$name.js .vendor/static/mathjax/input/tex/extensions/; \
	done
	rm -rf .vendor/tmp
	touch $@

# The unit tests again, in environments that change the order of floating-point sums as another
# machine would: torch's portable kernels; two torch threads together with two OpenMP/OpenBLAS
# threads. A test that compares floats bit for bit across computation paths fails here (README,
# "For developers"). The two thread settings share one run because they change disjoint
# libraries: lib sets torch's thread count itself (BOOK_TORCH_THREADS, lib.engine.config), so
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS reach only NumPy's and SciPy's OpenBLAS, and
# BOOK_TORCH_THREADS only torch. Every torch result of that run is the one two torch threads alone
# give, and every NumPy/SciPy result the one two BLAS threads alone give, so each comparison within
# one library sees what it saw in its own run; one between torch and NumPy sees both changes at
# once (and was never allowed to be exact). Tests marked "not_numerics" (grading, the browser)
# are left out: no arithmetic.
PORTABLE_PYTEST := $(BIN)/python -m pytest tests -q -n 2 -p no:cacheprovider -m "not not_numerics"
test-portable: $(STAMP)
	@echo "== unit tests with ATEN_CPU_CAPABILITY=default"
	ATEN_CPU_CAPABILITY=default $(PORTABLE_PYTEST)
	@echo "== unit tests with BOOK_TORCH_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2"
	BOOK_TORCH_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 $(PORTABLE_PYTEST)

# The site's copy of MathJax is removed first, so that it holds exactly the vendored files (Sphinx
# never deletes a static file it copied before).
book: $(STAMP) $(MATHJAX)
	rm -rf $(LEDGER_DIR) _build/html/_static/mathjax $(EXECUTED) $(READ_EVERY_PAGE)
	hash=$$($(SOURCES_HASH)); \
	BOOK_MODE=build $(RUN) $(MPL) $(BIN)/python tools/build_book.py . -W --keep-going; \
	$(BIN)/python tools/ledger.py check --executed-only; \
	if test -f $(READ_EVERY_PAGE); then echo "$$hash" > $(EXECUTED); else \
	  echo "make book executed only the pages whose source changed: make test will execute every chapter"; fi
	@echo "The book is in _build/html/index.html"

# Every page of the built book in headless Chromium (Debian's; installed with apt-get when missing
# and root), with every request for another host blocked: math typeset with no MathJax error and
# no inline formula cut off, figures, animations and sliders, collapsed solutions, notebook links,
# no console errors, at 390 px no page wider than the window and sidebars that open, the PDF's
# outline and links (tools/site_test.py). The PDF (make pdf's tools/pdf.py) is made in a child
# process while the pages are tested, and tested after them (--make-pdf): the two take about as
# long. To test a book built elsewhere without rebuilding: .venv/bin/python tools/site_test.py
# PATH/TO/html (after `make pdf`, so that the footer's PDF link resolves)
site-test: book
	$(RUN) $(MPL) $(BIN)/python tools/site_test.py --make-pdf _build/html

# The whole book as one PDF, _build/html/book.pdf, where every page's footer links to it:
# tools/pdf.py builds the single-page site and prints it with Debian's Chromium.
pdf: book
	$(RUN) $(MPL) $(BIN)/python tools/pdf.py

# The course: book/assignments/*.md (tools/assignments.py, book/course.md). make student: the
# student notebooks (otter-grader), with STUDENTS=<roster> one per student with their own
# parameters. make grade: each submission in a bubblewrap sandbox with a seccomp filter
# (bubblewrap and python3-seccomp, libseccomp's bindings that compile the filter, are installed
# with apt-get when missing and root), TIMEOUT (s) and MEMORY per sandbox, CELL_TIMEOUT (s) per
# cell, JOBS at once; ASSIGNMENT= when the notebooks lack their metadata; UNSANDBOXED=1 only
# where no sandbox can run. COURSE_SECRET (make student/grade COURSE_SECRET=...) draws the hidden tests' inputs and
# the students' parameters; the tools read it from the environment, so it is never echoed here.
TIMEOUT ?= 300
CELL_TIMEOUT ?= 60
JOBS ?= 2
MEMORY ?= 4G
student: $(STAMP)
	$(RUN) $(BIN)/python tools/assignments.py student $(if $(STUDENTS),--students "$(STUDENTS)")

grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=<folder of .ipynb>"; exit 2; }
	$(RUN) $(BIN)/python tools/assignments.py grade "$(SUBMISSIONS)" --timeout $(TIMEOUT) \
	  --cell-timeout $(CELL_TIMEOUT) --jobs $(JOBS) --memory $(MEMORY) \
	  $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(UNSANDBOXED),--unsandboxed)

lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks tools

bench: $(STAMP)
	$(RUN) $(BIN)/python benchmarks/run.py

# Tasks run on local processes (BOOK_WORKERS, default one per core) or on a Dask cluster
# (BOOK_DASK_SCHEDULER=tcp://host:8786, or local:N; README "On a cluster"); a stopped run resumes
# (FRESH=1 starts over). SCALING=<chapter>: time that chapter's cheapest tasks on 1, 2 and 4
# workers of a local Dask cluster instead.
reproduce: $(STAMP)
	$(RUN) $(BIN)/python benchmarks/reproduce.py $(if $(SCALING),--scaling $(SCALING),$(CHAPTERS) $(if $(FRESH),--fresh))

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
	.lockvenv/bin/pip install --progress-bar off -q -e '.[book,test,reproduce]'
	{ echo "# Exact versions that \`make\` installs (regenerate with \`make lock\`)."; \
	  echo "# Python $$(.lockvenv/bin/python -c 'import platform; print(platform.python_version())'), made by pip freeze."; \
	  .lockvenv/bin/pip freeze --all --exclude-editable --exclude pip | sed -e 's/^torch==\(.*\)+cpu$$/torch==\1/'; \
	} > requirements-lock.txt
	rm -rf .lockvenv

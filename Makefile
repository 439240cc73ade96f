# `make course` installs everything and opens the course; `make test` installs everything and tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: course test test-gpu release lock benchmark

$(STAMP): pyproject.toml packaging/grader/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[lab]' -e './packaging/grader[test]'
	bash .ci/install-graphviz
	bash .ci/install-bubblewrap
	bash .ci/install-chromium
	touch $(STAMP)

# Jupyter refuses to run as root unless told (containers, cloud machines).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

course: $(STAMP)
	$(BIN)/jupyter lab $(ROOT_FLAG) notebooks/

# Lint first (config in pyproject.toml), then every test, also after a lint error, so that one run
# reports both; it fails if either failed. GPU tests run where torch sees CUDA.
test: $(STAMP)
	$(BIN)/ruff check .; lint=$$?; $(BIN)/python -m pytest -n 2 && exit $$lint

# The GPU path alone: every solution notebook, its trusted grading and the benchmarks, on CUDA
# (tests/test_gpu.py; each test sets COURSE_DEVICE=cuda for what it runs, so that collecting the
# other test modules works on any machine). One process (no -n): the benchmarks' figures are
# not shared with another test's work. Without a GPU, one line says that everything was skipped.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -m gpu

# Regenerate the student notebooks in notebooks/ from solutions/ (nbgrader generate_assignment).
release: $(STAMP)
	$(BIN)/backprop-course release

# Re-pin every installed package (after changing pyproject.toml's ranges).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.txt

benchmark: $(STAMP)
	$(BIN)/python benchmarks/course_runtime.py

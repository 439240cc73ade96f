# `make course` installs everything and opens the course; `make test` installs everything and tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: course test release lock benchmark

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

test: $(STAMP)
	$(BIN)/python -m pytest -n 2

# Regenerate the student notebooks in notebooks/ from solutions/ (nbgrader generate_assignment).
release: $(STAMP)
	$(BIN)/backprop-course release

# Re-pin every installed package (after changing pyproject.toml's ranges).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.txt

benchmark: $(STAMP)
	$(BIN)/python benchmarks/course_runtime.py

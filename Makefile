# `make course` installs everything and opens the course; `make test` installs everything and tests;
# `make test-floor` tests the learner's side on the lowest torch and triton the package accepts.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: course test test-floor test-gpu release lock benchmark

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

# The learner's side (the checks' tests, Triton's set-up, every solution notebook) on the lowest torch and
# triton the learner's package accepts (.ci/floor.txt, which pins Colab's NumPy too; the rest as constraints.txt
# pins it), in a venv of its own. PyPI has no CPU build of that torch: it is a CUDA build (about 4 GB of
# downloads, not cached; 7.6 GB in the venv), which runs on the CPU here.
# COURSE_FLOOR=1: tests/test_floor.py checks that this venv, and a kernel it starts, run exactly the floor.
FLOOR_VENV ?= .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.installed
LEARNER_TESTS := $(wildcard tests/test_*checks.py) tests/test_battery.py tests/test_triton_setup.py \
	tests/test_device.py tests/test_floor.py tests/test_solutions.py

$(FLOOR_STAMP): pyproject.toml packaging/grader/pyproject.toml constraints.txt .ci/floor.txt
	$(PYTHON) -m venv $(FLOOR_VENV)
	grep -viE "^($$(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' .ci/floor.txt | paste -sd'|'))==" constraints.txt \
		| cat - .ci/floor.txt > $(FLOOR_VENV)/constraints.txt
	$(FLOOR_VENV)/bin/python -m pip install --quiet --no-cache-dir -c $(FLOOR_VENV)/constraints.txt \
		-e . -e './packaging/grader[test]'
	touch $(FLOOR_STAMP)

test-floor: $(FLOOR_STAMP)
	COURSE_FLOOR=1 $(FLOOR_VENV)/bin/python -m pytest -n 2 $(LEARNER_TESTS)

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

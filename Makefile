# Two entry points a new user needs: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install clean

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,onnx,parquet,sweep]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m tools.demo --output_dir=demo_out

# Two test files at a time (pytest-xdist; --dist loadfile keeps a file's shared runs in one process), the heaviest
# files first (LONGEST_FIRST in tests/conftest.py), so the last minutes are not one long file running alone.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

# Every module's own tests, without the end-to-end runs (marked slow): for each edit.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" tests

clean:
	rm -rf demo_out build *.egg-info

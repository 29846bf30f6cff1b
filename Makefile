# Every target does its own set-up: a fresh machine needs nothing but python3, g++ and make.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is pinned here (a CPU wheel is on these machines); the package itself only asks torch>=2.0.
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.deps-ok
EDITABLE := $(VENV)/.editable-ok

.PHONY: setup build train test bench bench-gpu lint clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q numpy "pybind11>=2.10" "setuptools>=61" wheel pytest ruff matplotlib psutil
	# data, CLI and NIR: none of these pulls torch
	$(BIN)/pip install -q h5py==3.16.0 scikit-learn==1.9.1 tqdm==4.70.1 nir==1.0.8 requests==2.32.5
	# --no-deps: snntorch's, nirtorch's and spikingjelly's own requirements would pull another
	# torch (spikingjelly's also torchvision, tensorboard, ...; of them its neurons need loguru);
	# tonic's would pull librosa and its stack, which reading events does not need.
	$(BIN)/pip install -q --no-deps snntorch==1.0.0 nirtorch==2.6 tonic==1.7.0 importRosbag==1.0.4
	# spikingjelly 2.0 needs Python 3.11+; without it its benchmark peer and tests skip.
	if $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	  $(BIN)/pip install -q --no-deps spikingjelly==2.0.0 loguru==0.7.3; fi
	# Triton (the GPU backend's kernels): its interpreter runs them on the CPU in the tests,
	# and its ptxas compiles them for sm_80 / sm_90; it has no dependencies (no torch).
	$(BIN)/pip install -q --no-deps triton==3.9.0
	touch $@

setup: $(STAMP)

# The editable install registers the package once (without compiling: SNN_IPU_SKIP_EXT);
# build_ext then builds the extension in place, and rebuilds it whenever a C++ source
# or header changed.
$(EDITABLE): $(STAMP) pyproject.toml setup.py
	SNN_IPU_SKIP_EXT=1 $(BIN)/pip install -q --no-build-isolation --no-deps -e .
	touch $@

build: $(EDITABLE)
	$(BIN)/python setup.py -q build_ext --inplace

# The default task is scikit-learn's bundled digits: real data that needs no download.
train: build
	$(BIN)/python -m snn_ipu train --save runs/train/model.pt --overwrite

test: build
	$(BIN)/python -m pytest -q tests

# Writes over the committed results in benchmarks/results/ (~20-25 min on an idle 2-core machine).
bench: build
	$(BIN)/python benchmarks/bench_training.py

# The triton backend against the dense GPU peers (needs an NVIDIA GPU and a CUDA build of
# torch in the venv: install one over the CPU wheel, e.g. from download.pytorch.org/whl/cu128).
bench-gpu: build
	$(BIN)/python -m snn_ipu bench --device cuda --out bench_results_gpu

lint: $(STAMP)
	$(BIN)/ruff check snn_ipu tests benchmarks examples

clean:
	rm -rf build *.egg-info snn_ipu/_C*.so snn_ipu/_cpu*.so

# smelt developer entry points. `make test` and `make demo` work on a fresh
# Debian 12 checkout: scripts/setup.sh installs and builds what is missing.
PYTHON ?= python3
export PYTHON
# Intel's OpenCL CPU runtime, for the SPIR-V back end (scripts/setup.sh writes the ICD file)
OCL_ICD_VENDORS ?= $(CURDIR)/build/opencl-vendors
export OCL_ICD_VENDORS
ASAN_RUN = LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0

.PHONY: setup build demo test test-all-pythons bench opinfo ulp debug clean wheel

setup:
	@bash scripts/setup.sh

build:
	@bash scripts/setup.sh build

demo: setup
	$(PYTHON) examples/quickstart.py

# The suite runs the op tables for the host and, in subprocesses with
# SMELT_CPU set, for x86-64-v3 (AVX2) and x86-64-v4 (AVX-512 without FP16):
# tests/test_targets.py.
test: setup
	$(PYTHON) -m pytest -q tests

# The suite on each of CPython 3.11, 3.12 and 3.13 that is present
# (python3.X on PATH, else pyenv's): packages installed and smelt._C built
# for each, one pass/fail line per version; fails if any fails.
test-all-pythons: setup
	@bash scripts/test_all_pythons.sh

# PyTorch's OpInfo database through smelt with every sample (the suite's
# tests/test_opinfo.py takes the first two per dtype) and the reference
# inputs: figures (op x dtype pairs matching, pairs with native code) and
# every failure. Fails on a wrong answer, a crash or a missing error.
opinfo: setup
	$(PYTHON) benchmarks/opinfo_report.py --cap 0
	$(PYTHON) benchmarks/opinfo_report.py --cap 0 --reference

# The float32 math functions over all 2^32 inputs against float64, smelt's
# and eager's errors side by side (benchmarks/ulp_sweep.py; ~30 s per
# function). Fails if one breaks its contract (inductor/cpu/vmath.h).
ulp: setup
	$(PYTHON) benchmarks/ulp_sweep.py

# The model suite (eager vs inductor vs smelt: MLP, CNN, GPT-2, BERT and the
# micro-kernels; bench_results.json/.png), then the tracer's call overhead and
# first-call scaling, vector math, training steps, FlexAttention (vs
# torch.compile and eager SDPA with masks), SDPA at small head dims and
# small ViTs vs eager, dynamic shapes (many
# lengths, KV-cache decoding) and the OpInfo report. Fails if any reports a
# wrong smelt result.
bench:
	@bash scripts/setup.sh bench
	@s=0; echo '$(PYTHON) -m smelt.bench'; $(PYTHON) -m smelt.bench || s=1; \
	echo '$(PYTHON) benchmarks/tracer.py'; $(PYTHON) benchmarks/tracer.py || s=1; \
	echo '$(PYTHON) benchmarks/vmath_bench.py'; $(PYTHON) benchmarks/vmath_bench.py || s=1; \
	echo '$(PYTHON) benchmarks/train_bench.py'; $(PYTHON) benchmarks/train_bench.py || s=1; \
	echo '$(PYTHON) benchmarks/flex_bench.py'; $(PYTHON) benchmarks/flex_bench.py || s=1; \
	echo '$(PYTHON) benchmarks/sdpa_small_heads.py'; $(PYTHON) benchmarks/sdpa_small_heads.py || s=1; \
	echo '$(PYTHON) benchmarks/dynamic_bench.py'; $(PYTHON) benchmarks/dynamic_bench.py || s=1; \
	echo '$(PYTHON) benchmarks/spirv_bench.py'; $(PYTHON) benchmarks/spirv_bench.py || s=1; \
	echo '$(PYTHON) benchmarks/opinfo_report.py -q'; $(PYTHON) benchmarks/opinfo_report.py -q || s=1; exit $$s

# Self-contained wheels in dist/, one per CPython 3.11/3.12/3.13 present:
# LLVM linked in, SLEEF and oneDNN bundled (scripts/wheel.sh; README).
wheel:
	@bash scripts/setup.sh wheel
	@bash scripts/wheel.sh

# ASan + UBSan build of smelt._C (python/smelt/_C*.so is replaced; the next
# `make setup`/`make test` switches back to the release build).
debug:
	@SMELT_DEBUG=1 bash scripts/setup.sh
	@echo 'run with: $(ASAN_RUN) $(PYTHON) -m pytest -q tests'

clean:
	rm -rf build python/smelt/_C*.so python/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

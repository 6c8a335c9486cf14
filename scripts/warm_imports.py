"""Write the bytecode of the modules a run imports, once, after ``make setup`` installs the project.

``make setup`` installs with ``pip --no-compile``: pip would otherwise compile every file of torch,
transformers and the rest (most never imported; it doubled the install's time here). Importing what
the stages, the report and the tests use writes bytecode for those modules alone, so that later runs
start as fast as after a compiled install. Run with bytecode writing on (the Makefile unsets
``PYTHONDONTWRITEBYTECODE`` for it). ``--vllm`` (``make setup-vllm``): vLLM's modules an engine imports too.
"""

import importlib
import sys

MODULES = [
    "torch", "transformers", "datasets", "accelerate", "peft", "trl", "math_verify", "lingua", "yaml",
    "matplotlib.pyplot", "pytest",
    "stages.commands.cli", "stages.pipeline.runner", "stages.training.grpo", "stages.training.sft", "stages.training.reward_model", "stages.training.pretrain",
    "stages.commands.report", "stages.commands.findings", "stages.base", "stages.stage1_zero", "stages.stage2_cold_start",
    "stages.stage3_reasoning_rl", "stages.stage4_final", "stages.distill",
]
VLLM_MODULES = ["vllm", "vllm.v1.engine.llm_engine", "vllm.v1.worker.cpu_worker", "vllm.v1.worker.cpu_model_runner",
                "vllm.model_executor.models.qwen2", "trl.generation.vllm_generation"]


def main() -> None:
    sys.dont_write_bytecode = False
    for name in MODULES + (VLLM_MODULES if "--vllm" in sys.argv[1:] else []):
        importlib.import_module(name)
    # classes that transformers and TRL import lazily, on first use
    from transformers import AutoModelForCausalLM, Qwen2ForCausalLM, Qwen2ForSequenceClassification  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer, RewardConfig, RewardTrainer, SFTConfig, SFTTrainer  # noqa: F401


if __name__ == "__main__":
    main()

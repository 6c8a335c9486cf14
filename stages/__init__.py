"""The top layer: the pipeline's stages, and what they stand on.

- the stages, one module each, which never import one another: ``base`` (with ``release``, the released
  tiny bases), ``stage1_zero``, ``stage2_cold_start``, ``stage3_reasoning_rl``, ``stage4_final``, ``distill``;
- ``stages.training``: the trainers they share (GRPO, SFT, reward models, the tiny base's pretraining), the
  rewards, and the one skeleton every training job runs through;
- ``stages.pipeline``: the machinery below them (recipe, manifest, runner, threads, plan, model cards);
- ``stages.commands``: the commands above them (the CLI, ``r1 eval``, the report, findings, pass@k).
"""

"""The top layer: training and the pipeline.

The stages, one module each, which never import one another (``base``, ``stage1_zero``,
``stage2_cold_start``, ``stage3_reasoning_rl``, ``stage4_final``, ``distill``); what they share: the
trainers (``trainer``, the skeleton they share; ``rl`` for GRPO, ``sft``, ``reward_model``, ``pretrain``;
``rewards``; ``common`` for models, devices and processes), and the machinery (``recipe``, ``manifest``,
``runner`` with the stage table, ``cli``, ``eval_command``, ``plan``, ``findings``, ``passk``, ``report``).
"""

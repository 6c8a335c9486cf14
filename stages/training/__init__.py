"""The trainers the stages share, and their rewards.

``skeleton`` owns the order of every training job (``train_section``); ``grpo`` (TRL's GRPOTrainer: stages 1, 3,
4's final RL, the distillation control), ``sft`` (SFTTrainer: stages 2, 4, distillation) and ``reward_model``
(RewardTrainer: stage 4) each implement its job protocol; ``evaluation`` is held-out evaluation around and during training; ``records`` what an RL run writes besides its model;
``rewards`` the reward functions in TRL's form; ``pretrain`` the tiny base's own pretraining loop.
"""

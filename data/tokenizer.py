"""The tiny base model's tokenizer: byte-level BPE with single-digit tokens, built with `tokenizers`.

Digits are split one per token before BPE (as Llama and Qwen do), so that digit-by-digit
arithmetic is learnable. Unlike Qwen's, the byte-level pre-tokenizer does not split text into words
first (``use_regex=False``), so BPE may merge across spaces: the template's fixed phrases and the
traces' recurring words become a few tokens each (the R1-Zero prompt is 36 tokens instead of 92),
which made pretraining and RL on 2 cores about twice as fast per document.

`<think>`, `</think>`, `<answer>` and `</answer>` are *ordinary* added tokens: TRL decodes completions
with ``skip_special_tokens=True``, and tags registered as special tokens would vanish before the
reward functions see them. The chat-role markers and end-of-text are special.

The tokenizer is saved as a plain ``TokenizersBackend``; load it with ``stages.common.load_tokenizer``
(``AutoTokenizer`` would rebuild it as a ``Qwen2Tokenizer`` with Qwen's pre-tokenizer, because the
model is a Qwen2: same text, different tokens).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from data.templates import CHAT_TEMPLATE, TAGS

EOS, BOS_CHAT, EOS_CHAT = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [EOS, BOS_CHAT, EOS_CHAT]


def build_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of ``vocab_size`` entries on ``texts`` and wrap it for transformers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=EOS,
        additional_special_tokens=[BOS_CHAT, EOS_CHAT],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast

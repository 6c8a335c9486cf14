"""The tiny base model's tokenizer: byte-level BPE with single-digit tokens, built with `tokenizers`.

Digits are split one per token before BPE (as Llama and Qwen do), so that digit-by-digit
arithmetic is learnable. Unlike Qwen's, the byte-level pre-tokenizer does not split text into words
first (``use_regex=False``), so BPE may merge across spaces: the template's fixed phrases and the
traces' recurring words become a few tokens each (the R1-Zero prompt is 36 tokens instead of 92),
which made pretraining and RL on 2 cores about twice as fast per document.

`<think>`, `</think>`, `<answer>` and `</answer>` are *ordinary* added tokens: TRL decodes completions
with ``skip_special_tokens=True``, and tags registered as special tokens would vanish before the
reward functions see them. End-of-text and the ChatML markers are special; the tiny model's chat
template is the corpus's own transcript format, ``User: … Assistant:`` (``data.templates``).

The tokenizer is saved as a plain ``TokenizersBackend``; load it with ``stages.pipeline.common.load_tokenizer``
(``AutoTokenizer`` would rebuild it as a ``Qwen2Tokenizer`` with Qwen's pre-tokenizer, because the
model is a Qwen2: same text, different tokens).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from data.templates import TAGS, TRANSCRIPT_CHAT_TEMPLATE

EOS, BOS_CHAT, EOS_CHAT = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [EOS, BOS_CHAT, EOS_CHAT]
# The readable summary's fixed words (data.templates.r1_response): whole tokens, as a tokenizer trained on
# ordinary text would have merges for them. The tiny corpus never contains them, so BPE learns none, and
# spelled byte by byte the summary was garbled after the cold-start SFT while the chains of thought
# before it were as accurate as stage 1's (docs/experiments.md).
SUMMARY_TOKENS = ("The final answer is", "\\boxed{")


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
    fast.chat_template = TRANSCRIPT_CHAT_TEMPLATE  # the corpus's transcript format (data/templates.py)
    return fast


def add_summary_tokens(tokenizer, model) -> list[int]:
    """Add :data:`SUMMARY_TOKENS` to a trained tokenizer and its model; returns their ids.

    Done after pretraining (the corpus never uses them, so pretraining is exactly what it would be
    without them): each new embedding row (tied to the output layer) starts as the mean of the rows of
    the pieces the token replaces, the usual initialisation for added tokens.
    """
    import torch

    pieces = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in SUMMARY_TOKENS]
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in SUMMARY_TOKENS])
    ids = tokenizer.convert_tokens_to_ids(list(SUMMARY_TOKENS))
    # a model padded past its tokenizer (base.architecture.embedding_rows) keeps its rows; the new ids fit in them
    model.resize_token_embeddings(max(len(tokenizer), model.get_input_embeddings().num_embeddings), mean_resizing=False)
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        for new, old in zip(ids, pieces, strict=True):
            emb[new] = emb[old].mean(dim=0)
    return ids

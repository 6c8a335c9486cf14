"""Prompt templates and the tag vocabulary every stage shares.

The R1-Zero template is the text of DeepSeek-R1's Table 1 with the user's problem in place of
``prompt``. Stage 1 uses it as a plain-text prompt on a *base* model (no chat template), exactly as
the paper does. Later stages speak through the tokenizer's chat template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

# DeepSeek-R1, Table 1 (verbatim, with {problem} for "prompt").
R1_ZERO_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
    "</answer>. User: {problem}. Assistant:"
)


def r1_zero_prompt(problem: str) -> str:
    """The R1-Zero prompt for one problem. Table 1 ends the user's turn with '.'; a problem that already
    ends in '?', '.' or '!' keeps its own mark instead of getting a second one."""
    problem = problem.strip()
    text = R1_ZERO_TEMPLATE.format(problem=problem)
    return text.replace(problem + ". Assistant:", problem + " Assistant:") if problem[-1:] in "?.!" else text


# DeepSeek-R1's recommended evaluation instruction for math; stages 2-4 train with the same user turn.
CHAT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def chat_user_message(problem: str) -> str:
    """The user turn of every chat-template stage (SFT, reasoning RL, evaluation). The instruction comes
    first, so that the problem sits right before the assistant's turn: the tiny model could not find
    the operands across the instruction's 20-odd tokens (DeepSeek appends it; either order is common)."""
    return f"{CHAT_INSTRUCTION}\n{problem.strip()}"


def r1_response(reasoning: str, answer: str) -> str:
    """DeepSeek-R1's readable pattern ``<reasoning_process>`` then ``<summary>``: a think block, then a
    one-line summary with the final answer boxed (what the cold-start set teaches, stage 2). Spaces, not
    the newlines DeepSeek's outputs use, around the tags: the tiny base has only seen ``<think> …``."""
    return f"{THINK_OPEN} {reasoning.strip()} {THINK_CLOSE} The final answer is \\boxed{{{answer}}}."


def r1_zero_completion(answer: str, reasoning: str | None) -> str:
    """A completion in the R1-Zero format; ``reasoning=None`` answers without a think block."""
    if reasoning is None:
        return f" {ANSWER_OPEN} {answer} {ANSWER_CLOSE}"
    return f" {THINK_OPEN} {reasoning} {THINK_CLOSE} {ANSWER_OPEN} {answer} {ANSWER_CLOSE}"


CHAT_END = "<|im_end|>"  # ends every chat turn (ChatML)

# A ChatML template with `{% generation %}` markers around the assistant turn, so TRL's
# `assistant_only_loss=True` can mask everything but the assistant's tokens. Transformers renders
# chat templates with trim_blocks, so a newline right after a block tag is eaten: newlines are
# written as explicit '\n' strings.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}"
    "{{ message['content'] + '<|im_end|>' }}"
    "{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


# -- The chat template SFT trains with -----------------------------------------------------------


@dataclass(frozen=True)
class TrainingTemplate:
    """How SFT renders conversations for a tokenizer (:func:`training_chat_template`).

    ``template``: the text rendered for training, with ``{% generation %}`` markers around the
    assistant's turn (TRL's ``assistant_only_loss`` masks everything else); ``install``: whether it
    replaces the tokenizer's own template (only the project's ChatML does: a model keeps its own, and
    TRL's ``SFTTrainer`` swaps in the same training twin by itself); ``source``: what was chosen, for
    the log and the manifest."""

    template: str
    install: bool
    source: str


def training_chat_template(tokenizer) -> TrainingTemplate:
    """The model's own chat template when it marks the assistant's turn; else TRL's training twin of
    it (``trl.chat_template_utils.get_training_chat_template``: the same text with the markers, and for
    DeepSeek-R1-Distill without the original's dropping of everything before ``</think>``, which would
    delete the reasoning from the target); the project's ChatML only for a tokenizer with no template
    or one TRL does not know."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    own = tokenizer.chat_template
    if isinstance(own, dict):  # a template shipped as named variants: the default one is the chat's
        own = own.get("default")
    if not own:
        return TrainingTemplate(CHAT_TEMPLATE, True, "project ChatML (the tokenizer has no chat template)")
    if has_generation_markers(own):
        return TrainingTemplate(own, False, "the model's own (it marks the assistant's turn)")
    try:
        twin = get_training_chat_template(tokenizer)
    except ValueError:  # TRL has no training twin of this template
        return TrainingTemplate(CHAT_TEMPLATE, True, "project ChatML (TRL has no training version of the "
                                                     "model's template, which does not mark the assistant's turn)")
    return TrainingTemplate(twin or own, False, "TRL's training twin of the model's own")


def end_of_turn_token(tokenizer, template: str | None = None) -> str | None:
    """The special token a chat template writes right after an assistant's message (``<|im_end|>``
    for ChatML and Qwen, ``<｜end▁of▁sentence｜>`` for DeepSeek, the end-of-text token for the tiny
    transcripts): generation must stop there. None when the template writes none."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "1"}, {"role": "assistant", "content": "\x00"}],
                                         tokenize=False, chat_template=template)
    after = text[text.rfind("\x00") + 1:].lstrip()
    special = sorted(set(tokenizer.all_special_tokens) | set(getattr(tokenizer, "added_tokens_encoder", {})),
                     key=len, reverse=True)
    return next((t for t in special if t and after.startswith(t)), None)


# -- Templates that open the think block themselves ------------------------------------------------

_PREFILLED_THINK = re.compile(r"<think>\s*$")


def prefilled_think(prompt: str) -> str:
    """The opening of a think block at the very end of a generation prompt (``<think>`` and the
    whitespace after it; '' when there is none). DeepSeek-R1-Distill's chat template ends every prompt
    with ``<｜Assistant｜><think>\\n``: the model's output starts *inside* the block, and the project
    puts this text back in front of it before anything reads it (:func:`with_prefill`), so that a
    response always reads ``<think> … </think> summary``."""
    m = _PREFILLED_THINK.search(prompt)
    return m.group() if m else ""


def assistant_prefill(tokenizer) -> str:
    """What the tokenizer's chat template writes of the assistant's response itself (see
    :func:`prefilled_think`); '' for templates that leave the whole response to the model."""
    if not tokenizer.chat_template:
        return ""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "1+1"}], tokenize=False,
                                           add_generation_prompt=True)
    return prefilled_think(prompt)


def with_prefill(completion, prefill: str):
    """A completion as it reads with the prompt's prefill in front: a string, or TRL's conversational
    form (a list of messages, the first one the assistant's)."""
    if not prefill:
        return completion
    if isinstance(completion, str):
        return prefill + completion
    first, *rest = completion
    return [{**first, "content": prefill + (first.get("content") or "")}, *rest]


def align_to_prefill(response: str, prefill: str) -> str:
    """An SFT target that opens its think block exactly as the template's generation prompt does
    (``<think> reasoning`` becomes ``<think>\\nreasoning`` under a ``<think>\\n`` prefill), so the
    trained text continues the prompt the model is later sampled from."""
    body = response.lstrip()
    if not prefill or not body.startswith(THINK_OPEN):
        return response
    return prefill + body[len(THINK_OPEN):].lstrip()


# The tiny model's chat template: DeepSeek-style plain role names (DeepSeek-V3 and R1 write
# ``<｜User｜>…<｜Assistant｜>``), here as the transcripts of the tiny pretraining corpus,
# ``User: … Assistant:``; the assistant's turn ends with the end-of-text token. A base model that has
# seen transcripts in pretraining is then fine-tuned (stage 2) in a format it already reads: with
# ChatML, which the tiny base had never seen, the cold-start SFT had to relearn finding the operands
# and lost most of the base's arithmetic (docs/experiments.md). The assistant's
# text follows ``Assistant:`` directly: the prompt then ends with a character that no BPE merge joins
# to the response's first token (``<think>``, a tag), so the prompt's tokens are a prefix of the whole
# conversation's, in training and in generation alike.
TRANSCRIPT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ ' Assistant:' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}"
    "{{ ('' if loop.first else '\\n') + message['role'] | capitalize }}{{ ': ' + message['content'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ ' Assistant:' }}{% endif %}"
)

# -- Reading a completion in the R1 format ---------------------------------------------------------

_WELL_FORMED = re.compile(r"^\s*<think>(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*$", re.S)
_BOX_RE = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{")
_BRACE_RE = re.compile(r"\\[{}]|[{}]")


def think_text(completion: str) -> str | None:
    """The chain of thought: the text inside the first <think> block (to the end if never closed);
    None when the completion has no <think>."""
    start = completion.find(THINK_OPEN)
    if start < 0:
        return None
    body = completion[start + len(THINK_OPEN) :]
    end = body.find(THINK_CLOSE)
    return body if end < 0 else body[:end]


def summary_of(response: str) -> str:
    """The text after the last ``</think>`` (the whole response if there is none), stripped, without a
    trailing ``<|im_end|>``: the summary DeepSeek-R1's helpfulness reward model reads."""
    text = response.rsplit("</think>", 1)[-1].strip()
    while text.endswith("<|im_end|>"):
        text = text.removesuffix("<|im_end|>").rstrip()
    return text


def boxes(text: str) -> list[tuple[int, int, int]]:
    """Every *balanced* ``\\boxed{…}`` (also ``\\fbox``, ``\\framebox``) in ``text``, in order, as
    (start of the command, start of the content, end of the content). Escaped braces ``\\{``/``\\}``
    do not count; an unclosed box is left out. Linear in ``len(text)``."""
    starts = list(_BOX_RE.finditer(text))
    if not starts:
        return []
    stack: list[int] = []
    pairs: dict[int, int] = {}  # index of every balanced "{" -> index of its "}"
    for m in _BRACE_RE.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif m.group() == "}" and stack:
            pairs[stack.pop()] = m.start()
    return [(m.start(), m.end(), pairs[m.end() - 1]) for m in starts if m.end() - 1 in pairs]


# Characters that show nothing: fillers drawn blank (Hangul fillers, the blank Braille pattern); the
# rest of "nothing" is by Unicode category in :func:`is_blank` (format characters such as zero-width
# spaces and joiners, bidi marks, BOM; controls; separators; combining marks with nothing to combine with)
_BLANK_CHARS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_BLANK_CATEGORIES = frozenset({"Cf", "Cc", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me"})


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: whitespace, and zero-width or other invisible characters
    (``\\u200b``, ``\\u2060``, ``\\ufeff``, bidi marks, Hangul fillers…), alone or together."""
    import unicodedata

    return all(c in _BLANK_CHARS or unicodedata.category(c) in _BLANK_CATEGORIES for c in text)


def has_content(text: str) -> bool:
    """Whether an answer region says something: not blank (:func:`is_blank`), and when it boxes its
    answer, the last balanced box is not blank (``\\boxed{}`` or ``\\boxed{\\u200b}`` is no answer)."""
    found = boxes(text)
    if found:
        _, start, end = found[-1]
        return not is_blank(text[start:end])
    return not is_blank(text)


def is_well_formed(completion: str) -> bool:
    """Exactly one non-blank <think>…</think> followed by one <answer>…</answer> with content (not
    blank, and not an empty box), and nothing else around them (the format the R1-Zero reward asks for).
    Linear: the tags are counted before the pattern runs (with one of each it cannot backtrack)."""
    if not all(completion.count(tag) == 1 for tag in TAGS):
        return False
    m = _WELL_FORMED.match(completion)
    return bool(m) and not is_blank(m["think"]) and has_content(m["answer"])


_READABLE = re.compile(r"^\s*<think>(?P<think>.*?)</think>(?P<summary>.*)$", re.S)


def is_readable_response(completion: str) -> bool:
    """Stages 2-4's pattern (:func:`r1_response`): exactly one non-empty think block, then a summary
    that holds a balanced, non-empty ``\\boxed{…}`` final answer and no other tags."""
    if completion.count(THINK_OPEN) != 1 or completion.count(THINK_CLOSE) != 1 or any(
            tag in completion for tag in (ANSWER_OPEN, ANSWER_CLOSE)):
        return False
    m = _READABLE.match(completion)
    return bool(m) and not is_blank(m["think"]) and bool(boxes(m["summary"])) and has_content(m["summary"])

"""A custom reward that a recipe names by its import path (tests/test_rewards.py): TRL's form,
``f(completions, **kwargs) -> list[float | None]``. Also a name that is not callable."""


def length_reward(completions, **kwargs) -> list[float]:
    """The length of each completion's text, in characters (a plain string, or the messages' contents)."""
    return [float(len(c if isinstance(c, str) else "".join(m["content"] for m in c))) for c in completions]


NOT_A_REWARD = 3


async def async_reward(completions, **kwargs):
    """An async reward (TRL accepts them; the project's recorder does not)."""
    return [0.0 for _ in completions]

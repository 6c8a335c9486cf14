"""A custom reward module that cannot be imported: it needs a package that is not installed
(tests/test_rewards.py checks that the error names that package, not this module, as missing)."""

import no_such_dependency_of_a_reward  # noqa: F401


def length_reward(completions, **kwargs) -> list[float]:
    return [float(len(c)) for c in completions]

"""Where the minutes go: each second counted once, for the innermost kind of work."""

import threading
import time

import pytest

from data import timing


@pytest.fixture(autouse=True)
def _fresh():
    timing.reset()
    yield
    timing.reset()


def test_inner_kind_is_subtracted_from_the_outer_one():
    with timing.timed("evaluation"):
        time.sleep(0.1)
        with timing.timed("sampling"):
            time.sleep(0.2)
    seconds = timing.snapshot()
    assert seconds["sampling"] == pytest.approx(0.2, abs=0.05)
    assert seconds["evaluation"] == pytest.approx(0.1, abs=0.05)  # not 0.3: the sampling is not counted twice


def test_decorator_counts_every_call_and_survives_exceptions():
    @timing.timed_as("grading")
    def grade(fail):
        time.sleep(0.15)
        if fail:
            raise ValueError("bad")

    grade(False)
    with pytest.raises(ValueError):
        grade(True)
    assert timing.snapshot()["grading"] == pytest.approx(0.3, abs=0.06)
    with timing.timed("saving"):  # the stack is empty again: a new block counts from zero
        time.sleep(0.2)
    assert timing.snapshot()["saving"] == pytest.approx(0.2, abs=0.06)  # snapshot rounds to 0.1 s


def test_helper_threads_are_not_counted_and_reset_clears():
    def grade():
        with timing.timed("grading"):
            time.sleep(0.1)

    thread = threading.Thread(target=grade)
    with timing.timed("evaluation"):
        thread.start()
        thread.join()
    assert "grading" not in timing.snapshot() and timing.snapshot()["evaluation"] >= 0.1
    timing.reset()
    assert timing.snapshot() == {}


def test_process_age_is_positive_and_below_the_machines_uptime():
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    assert 0.0 < timing.process_age() <= uptime

"""The parallel layout of a stage: the recipe's thread count and sampling processes, never measured (stages/pipeline/threads.py)."""

import os
import subprocess
import sys
import time

import pytest
import torch

from stages.pipeline.threads import SideJob, busy_elsewhere, fix_threads, fixed_threads, part_threads

CORES = len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _restore_threads(monkeypatch):
    monkeypatch.delenv("R1_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def spinning_neighbour():
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    yield p
    p.kill()
    p.wait()


@pytest.mark.skipif(CORES < 2, reason="needs 2 cores")
def test_a_busy_neighbour_changes_nothing_but_is_recorded(spinning_neighbour):
    """The recipe's count holds beside a busy neighbour (another count would sum differently): the
    neighbour is only recorded."""
    assert busy_elsewhere(0.5) > 0.7
    decided = fix_threads(2, measure_seconds=0.5)
    assert decided["chosen_by"] == "recipe" and decided["busy_elsewhere"] > 0.7
    assert decided["threads"] == 2 == torch.get_num_threads()
    assert fix_threads(1)["threads"] == 1 == torch.get_num_threads()


def stand_in_machine(monkeypatch, neighbour, own: float) -> None:
    """/proc/stat and the clock stood in for ``busy_elsewhere``: in window i the other processes keep
    ``neighbour[i]`` cores busy and this process ``own`` cores (the suite's other lane makes the real
    machine's load move between any two readings)."""
    import stages.pipeline.threads as threads

    clock, busy, mine, windows = [0.0], [0.0], [0.0], iter(neighbour)

    def sleep(dt):
        cores = next(windows)
        clock[0] += dt
        busy[0] += (cores + own) * dt
        mine[0] += own * dt

    monkeypatch.setattr(threads, "_busy_and_own", lambda: (busy[0], mine[0]))
    monkeypatch.setattr(threads.time, "sleep", sleep)
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])


def test_this_process_own_work_is_not_counted_as_a_neighbour(monkeypatch):
    """Its own time counts every thread of the process (a busy torch or sampler thread is ours), and that
    time is taken out of the machine's. Split in two so that the suite's other lane, whose load moves
    between any two real readings, cannot make it fail: this process's own time is read for real, the
    subtraction on a stood-in /proc/stat and clock."""
    import threading

    import stages.pipeline.threads as threads

    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    _, own0 = threads._busy_and_own()
    t0 = time.monotonic()
    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.5)  # the main thread idles: the time counted is the spinning thread's
    finally:
        stop.set()
        t.join()
    _, own1 = threads._busy_and_own()
    assert own1 - own0 > 0.3 * (time.monotonic() - t0)  # a core shared with the other lane still gives it > 0.3

    stand_in_machine(monkeypatch, neighbour=[0, 0, 0], own=1.0)  # one core busy, all of it this process's
    assert busy_elsewhere(0.6) == 0.0


def test_r1_threads_fixes_the_count_and_bad_values_are_refused(monkeypatch, spinning_neighbour):
    monkeypatch.setenv("R1_THREADS", "2")
    decided = fix_threads(1)
    assert (decided["threads"], decided["chosen_by"]) == (2, "R1_THREADS") and torch.get_num_threads() == 2
    monkeypatch.setenv("R1_THREADS", "two")
    with pytest.raises(ValueError, match="R1_THREADS"):
        fix_threads(1)


def test_a_launchers_omp_num_threads_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    assert fix_threads(2)["chosen_by"] == "OMP_NUM_THREADS"
    assert torch.get_num_threads() == 1


def test_fixed_threads_names_what_fixed_the_count(monkeypatch):
    """One answer for every caller (a stage's count, and whether a later stage's side work would run on the
    recipe's count): R1_THREADS first, then a launcher's OMP_NUM_THREADS (torch read it), else none."""
    assert fixed_threads() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    assert fixed_threads() == (1, "OMP_NUM_THREADS")
    monkeypatch.setenv("R1_THREADS", "2")
    assert fixed_threads() == (2, "R1_THREADS")
    monkeypatch.setenv("R1_THREADS", "0")
    with pytest.raises(ValueError, match="R1_THREADS"):
        fixed_threads()


@pytest.mark.parametrize("neighbour,expected", [
    ([1.0, 0.0, 0.0], 0.0),  # busy for a third of the measurement (a passing shell command): not a neighbour
    ([1.0, 1.0, 1.0], 1.0),  # busy throughout: one core
    ([2.0, 1.5, 1.0], 1.0),  # the least of the windows
])
def test_a_process_that_runs_for_a_moment_is_not_taken_for_a_neighbour(monkeypatch, neighbour, expected):
    """The least of the windows counts, on a machine whose other processes' cores per window are given
    (a clock and /proc/stat stood in: the suite's other lane makes the real machine's load move)."""
    stand_in_machine(monkeypatch, neighbour, own=0.5)  # this process busy half the time
    assert busy_elsewhere(0.6, windows=3) == pytest.approx(expected)


def test_the_recipe_fixes_each_stages_threads(monkeypatch, tmp_path):
    """The stage's count is the recipe's (its own, else ``default``; none: torch's), whatever the machine
    is doing; R1_THREADS still fixes it; an unknown stage or a count below 1 is refused."""
    import stages.pipeline.runner as runner
    from stages.pipeline.recipe import load_recipe

    tiny = load_recipe("tiny")
    assert tiny.threads == {"default": 1, "base": 2} and tiny.sample_processes == {"default": 2, "distill_rl": 1}
    assert runner.stage_sample_processes(tiny, "stage1") == 2 and runner.stage_sample_processes(tiny, "distill_rl") == 1
    assert runner.stage_threads(tiny, "stage1") == 1 and runner.stage_threads(tiny, "base") == 2
    assert runner.stage_threads(load_recipe("tiny", ["threads={}"]), "stage1") is None
    seen = {}

    def body(ctx):
        seen.update(ctx.manifest.data["metrics"]["threads"], now=torch.get_num_threads())

    monkeypatch.setattr("stages.pipeline.threads.busy_elsewhere", lambda seconds=0.3, windows=3: 1.0)  # a busy machine
    runner.run_stage(load_recipe("tiny", [f"run_root={tmp_path}", "threads={default: 2, stage1: 1}",
                                          "sample_processes=3"]), "base", body)
    assert (seen["threads"], seen["now"], seen["chosen_by"], seen["sample_processes"]) == (2, 2, "recipe", 3)
    assert seen["busy_elsewhere"] == 1.0
    runner.run_stage(load_recipe("tiny", [f"run_root={tmp_path}", "threads={default: 1}", "base.release=null",
                                          "sample_processes={default: 3, base: 1}"]), "base", body, restart=True)
    assert (seen["threads"], seen["sample_processes"]) == (1, 1)  # the stage's own count over the default
    with pytest.raises(ValueError, match="sample_processes: unknown stage stage9"):
        runner.run_stage(load_recipe("tiny", ["sample_processes={stage9: 1}"]), "stage1", lambda ctx: None)
    torch.set_num_threads(CORES)
    if CORES > 1 and not torch.cuda.is_available():
        assert fix_threads(None)["chosen_by"] == "torch (the recipe fixes no count)"
    with pytest.raises(ValueError, match=r"threads\.stage1: must be >= 1, got 0"):
        load_recipe("tiny", ["threads={stage1: 0}"])
    with pytest.raises(ValueError, match="sample_processes"):
        load_recipe("tiny", ["sample_processes=0"])
    for key in ("stage9", "stage4.nope", "stage1.sft"):
        with pytest.raises(ValueError, match=f"threads: unknown stage or part {key};"):
            runner.run_stage(load_recipe("tiny", [f"threads={{{key}: 1}}"]), "stage1", lambda ctx: None)


def test_the_sampler_uses_the_fixed_process_count():
    """``sample_processes`` decides how many processes the CPU sampler forks (fast_generate's draws
    depend on it), not the thread count."""
    from eval.decode import sample_processes, set_sample_processes

    torch.set_num_threads(1)
    try:
        assert set_sample_processes(3) == 3 == sample_processes()
        assert set_sample_processes(None) == 1  # unset: one per torch thread
        with pytest.raises(ValueError, match="at least 1"):
            set_sample_processes(0)
    finally:
        set_sample_processes(None)


def test_a_part_runs_on_its_own_count_and_gives_the_stage_its_count_back():
    torch.set_num_threads(2)
    with part_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with part_threads(None):
        assert torch.get_num_threads() == 2
    with part_threads(3):
        assert torch.get_num_threads() == 3  # the recipe's count, not a cap
    with pytest.raises(KeyError), part_threads(1):
        raise KeyError("a part that fails")
    assert torch.get_num_threads() == 2


def test_side_work_that_fails_is_reported_and_side_work_of_a_failed_stage_is_stopped(tmp_path, caplog):
    """Side work is optional: a failure is logged with its log's tail (the stage that needs the work does it
    itself) and recorded; a stage that fails kills its side work instead of leaving it running."""
    failing = SideJob("a failing job", "stages.no_such_module", [], log_path=tmp_path / "fail.log", threads=1)
    record = failing.finish()
    assert record["exit_code"] != 0 and record["what"] == "a failing job"
    assert "No module named stages.no_such_module" in caplog.text
    slow = SideJob("a slow job", "timeit", ["-n", "1", "-r", "1", "import time; time.sleep(60)"],
                   log_path=tmp_path / "slow.log", threads=1)
    t0 = time.time()
    slow.stop()
    assert slow.process.returncode is not None and time.time() - t0 < 10


def test_core_speed_measures_one_thread_and_leaves_the_count_alone():
    from stages.pipeline.threads import core_speed

    torch.set_num_threads(2)
    try:
        speed = core_speed()
        assert torch.get_num_threads() == 2 and 1 < speed < 10_000  # GFLOP/s of one core: a plausible figure
    finally:
        torch.set_num_threads(CORES)


def test_work_done_ahead_is_taken_only_when_it_is_what_the_stage_would_do(tmp_path):
    """stages/pipeline/prebuilt.py: a side process's work is copied into the stage (merged: a student's folder
    keeps its base; the trainers' checkpoints stay behind) with its recorded metrics, only when its recipe and
    every dependency it recorded match the stage's; a different or unfinished one is removed, nothing copied."""
    from stages.pipeline import prebuilt
    from stages.pipeline.manifest import Manifest
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import StageContext

    r = load_recipe("tiny", [f"run_root={tmp_path}"])

    def side(name: str, *, finished: bool = True, **depends) -> None:
        ctx = prebuilt.scratch_stage(r, "distill", name)
        (ctx.dir / "s1" / "sft_trainer" / "checkpoint-2").mkdir(parents=True)
        (ctx.dir / "s1" / "sft").mkdir()
        (ctx.dir / "s1" / "sft" / "model.safetensors").write_bytes(b"weights")
        ctx.manifest.update_metrics(**{"sft_s1/sft": {"steps": 2}, "other": 1})
        if finished:
            prebuilt.finish(ctx, ["sft_s1/sft"], threads=1, **depends)

    stage_dir = r.stage_dir("distill")
    (stage_dir / "s1" / "base").mkdir(parents=True)
    (stage_dir / "s1" / "base" / "model.safetensors").write_bytes(b"base")
    stage = StageContext(r, "distill", stage_dir, Manifest.start(stage_dir, "distill", r), None, False)
    for name, kw, depends in [("other-data", {"data": "abc"}, {"data": "abd"}),
                              ("other-threads", {"data": "abc"}, {"data": "abc", "threads": 2}),
                              ("killed", {"finished": False, "data": "abc"}, {"data": "abc"})]:
        side(name, **kw)
        assert prebuilt.adopt(stage, name, "a student's SFT", **{"threads": 1, **depends}) is None, name
        assert not prebuilt.folder(r, name).exists() and not (stage_dir / "s1" / "sft").exists()
    assert "sft_s1/sft" not in stage.manifest.data["metrics"]

    side("same", data="abc")
    assert prebuilt.adopt(stage, "same", "a student's SFT", threads=1, data="abc")["data"] == "abc"
    assert (stage_dir / "s1" / "sft" / "model.safetensors").read_bytes() == b"weights"
    assert (stage_dir / "s1" / "base" / "model.safetensors").read_bytes() == b"base"
    assert not (stage_dir / "s1" / "sft_trainer").exists() and not prebuilt.folder(r, "same").exists()
    assert stage.manifest.data["metrics"]["sft_s1/sft"] == {"steps": 2, "built": "side work"}
    assert "other" not in stage.manifest.data["metrics"]

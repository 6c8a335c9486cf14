"""Bad inputs get a clear error naming what is wrong, or are skipped and counted; nothing is lost."""

import errno
import os

import pytest

from stages.commands.cli import main
from stages.pipeline.common import check_model_ref, save_model_atomically
from stages.training.grpo import fit_prompts


class CharTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text)}

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True):
        text = "".join(m["content"] for m in messages)
        # as transformers 5: tokenize=True gives a BatchEncoding (two fields), not a list of ids
        return {"input_ids": list(text), "attention_mask": [1] * len(text)} if tokenize else text


def test_prompts_longer_than_the_context_are_skipped_and_counted():
    rows = [{"problem": "x" * n} for n in (5, 50, 8)]
    kept, dropped = fit_prompts(rows, lambda r: r["problem"], CharTokenizer(), 10, "data.jsonl")
    assert [len(r["problem"]) for r in kept] == [5, 8] and dropped == 1
    chat = lambda r: [{"role": "user", "content": r["problem"]}]  # noqa: E731
    assert fit_prompts(rows, chat, CharTokenizer(), 10, "data.jsonl")[1] == 1
    with pytest.raises(ValueError, match="data.jsonl: every prompt is longer than 4 tokens"):
        fit_prompts(rows, lambda r: r["problem"], CharTokenizer(), 4, "data.jsonl")


def test_a_missing_local_model_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        check_model_ref(str(tmp_path / "nope"))
    check_model_ref("Qwen/Qwen2.5-1.5B")  # a hub id is not a local path
    assert main(["base", "--recipe", "tiny", "--set", f"run_root={tmp_path}",
                 "--set", f"base.pretrained={tmp_path / 'missing-model'}"]) == 2


def test_a_full_disk_during_save_leaves_no_partial_checkpoint(tmp_path):
    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "model.safetensors").write_text("the previous checkpoint")

    class FullDisk:
        def save_pretrained(self, folder):
            folder.mkdir(parents=True)
            (folder / "model.safetensors").write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        save_model_atomically(FullDisk(), None, target)
    assert (target / "model.safetensors").read_text() == "the previous checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]  # the partial .checkpoint.tmp is gone


# -- one run per stage folder; --restart loses nothing; deletions stay inside the run folder ----------


def _fake_stage(recipe, tmp_path, body, restart=False):
    from stages.pipeline.runner import run_stage

    return run_stage(recipe, "base", body, restart=restart)


def _written(text):
    def body(ctx):
        out = ctx.dir / "checkpoint"
        out.mkdir(parents=True, exist_ok=True)
        (out / "weights.txt").write_text(text)
        return out
    return body


def test_the_same_stage_twice_at_once_refuses_naming_the_process(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from stages.commands.cli import main
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import StageBusy, lock_path

    recipe = load_recipe("tiny", [f"run_root={tmp_path}"])
    stage_dir = recipe.stage_dir("base")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from stages.pipeline.runner import lock_stage; "
                               f"lock_stage({str(stage_dir)!r}); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(StageBusy, match=f"already running in process {holder.pid}"):
        _fake_stage(recipe, tmp_path, _written("second"))
    assert not stage_dir.exists()  # the second run touched nothing
    stage_dir.mkdir(parents=True)
    (stage_dir / "manifest.json").write_text("{}")
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        main(["status", str(stage_dir.parent)])
    assert f"RUNNING now, process {holder.pid}" in out.getvalue()
    holder.send_signal(signal.SIGKILL)  # the kernel releases the lock with the process
    holder.wait()
    time.sleep(0.1)
    (stage_dir / "manifest.json").unlink()
    assert _fake_stage(recipe, tmp_path, _written("third")).status == "complete"
    assert lock_path(stage_dir).exists()


def test_restart_moves_the_previous_run_aside_and_puts_it_back_if_the_new_one_fails(tmp_path):
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import previous_dir

    recipe = load_recipe("tiny", [f"run_root={tmp_path}"])
    stage_dir = recipe.stage_dir("base")
    assert _fake_stage(recipe, tmp_path, _written("first")).status == "complete"

    def bad(ctx):
        raise FileNotFoundError("no such file: missing.jsonl")  # e.g. a dataset path that does not exist

    with pytest.raises(FileNotFoundError):
        _fake_stage(recipe, tmp_path, bad, restart=True)
    assert (stage_dir / "checkpoint" / "weights.txt").read_text() == "first"  # nothing lost
    assert not previous_dir(stage_dir).exists()
    assert _fake_stage(recipe, tmp_path, _written("second"), restart=True).status == "complete"
    assert (stage_dir / "checkpoint" / "weights.txt").read_text() == "second"
    assert not previous_dir(stage_dir).exists()  # deleted once the new run completed


def test_names_cannot_point_outside_the_run_folder(tmp_path):
    from stages.pipeline.recipe import RecipeError, load_recipe
    from stages.pipeline.runner import inside_run_folder

    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("../../victim", "a/b", "..", ""):
        with pytest.raises(RecipeError, match="must be a plain folder name"):
            load_recipe("tiny", [f"run_root={tmp_path / 'runs'}", f"name={name!r}"])
    with pytest.raises(RecipeError, match="student name"):
        load_recipe("tiny", ["distill.students=[{name: ../x}]"])
    recipe = load_recipe("tiny", [f"run_root={tmp_path / 'runs'}"])
    with pytest.raises(ValueError, match="not inside the run folder"):
        inside_run_folder(victim, recipe)
    with pytest.raises(ValueError, match="not inside the run folder"):
        inside_run_folder(recipe.stage_dir("base").parent, recipe)  # the run folder itself neither
    assert victim.exists()


# -- manifests: valid JSON of the wrong shape, empty file lists, unrecorded files, relabelled stages ------


@pytest.mark.parametrize("tamper, field", [
    (lambda d: d.update(output=None), "'output' must be a mapping, got null"),
    (lambda d: d.pop("output"), "'output' must be a mapping, got null"),
    (lambda d: d["output"].update(files=None), "'output.files' must be a mapping of file → sha256, got null"),
    (lambda d: d.update(metrics=[]), "'metrics' must be a mapping, got list"),
    (lambda d: d["output"].update(files={}), "'output.files' is empty for a complete stage with a checkpoint"),
])
def test_a_manifest_of_the_wrong_shape_is_refused_naming_the_field(tmp_path, capsys, tamper, field):
    import io
    import json
    from contextlib import redirect_stdout

    from stages.pipeline.recipe import load_recipe

    recipe = load_recipe("tiny", [f"run_root={tmp_path}"])
    _fake_stage(recipe, tmp_path, _written("w"))
    path = recipe.stage_dir("base") / "manifest.json"
    data = json.loads(path.read_text())
    tamper(data)
    path.write_text(json.dumps(data))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["status", str(recipe.stage_dir("base").parent)]) == 0
    assert f"base     UNREADABLE: {path}: field {field}" in out.getvalue()
    assert "distill_rl" in out.getvalue()  # status went on past the bad stage
    assert main(["stage1", "--recipe", "tiny", "--set", f"run_root={tmp_path}"]) == 2
    assert f"field {field}" in capsys.readouterr().err  # a clear error, no traceback


def test_unrecorded_files_and_relabelled_manifests_are_reported(tmp_path):
    import io
    from contextlib import redirect_stdout

    from stages.pipeline.manifest import Manifest
    from stages.pipeline.recipe import load_recipe

    recipe = load_recipe("tiny", [f"run_root={tmp_path}"])
    m = _fake_stage(recipe, tmp_path, _written("w"))
    assert m.verify_checkpoint() == []
    (recipe.stage_dir("base") / "checkpoint" / "eval").mkdir()
    (recipe.stage_dir("base") / "checkpoint" / "eval" / "results.json").write_text("{}")  # r1 eval's own output
    assert Manifest.load(m.path).verify_checkpoint() == []
    (recipe.stage_dir("base") / "checkpoint" / "extra.bin").write_bytes(b"x")
    assert Manifest.load(m.path).verify_checkpoint() == ["extra.bin (not recorded in the manifest)"]
    (recipe.stage_dir("stage1")).mkdir()
    (recipe.stage_dir("stage1") / "manifest.json").write_text(m.path.read_text())  # base's manifest, as stage 1's
    out = io.StringIO()
    with redirect_stdout(out):
        main(["status", str(recipe.stage_dir("base").parent)])
    assert "base     complete (CHECKPOINT CHANGED)" in out.getvalue()
    assert "stage1   WRONG STAGE" in out.getvalue()


def test_a_base_that_is_not_a_model_fails_at_registration(tmp_path, capsys, monkeypatch):
    """base.pretrained naming nothing, or a folder without a model, fails in the base stage with the
    key named, not in stage 1 after the hub's retries; the base manifest is never complete."""
    from stages.pipeline.manifest import Manifest

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    (not_a_model / "readme.txt").write_text("no model here")
    for ref, message in (("nosuchorg/nosuchmodel", "not in the local cache, and the hub is offline"),
                         (str(not_a_model), "is a folder but not a model")):
        runs = tmp_path / ref.replace("/", "_")
        assert main(["base", "--recipe", "tiny", "--set", f"run_root={runs}", "--set", f"base.pretrained={ref}"]) == 2
        err = capsys.readouterr().err
        assert f"base.pretrained: {ref}" in err and message in err, err
        assert Manifest.load(runs / "tiny" / "base").status == "failed"


def test_inputs_that_escaped_the_clear_error_path(tmp_path):
    """Deep nesting and a non-UTF-8 recipe give errors naming the file; NaN/Infinity golds and ids that
    are not strings or integers are skipped and counted, not used as "nan" or "None"."""
    from data.datasets import clean_rows
    from data.jsonl import DataError, read_jsonl
    from stages.pipeline.recipe import RecipeError, load_recipe

    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"id": "a", "problem": ' + "[" * 200_000 + "]" * 200_000 + ', "answer": "1"}\n')
    with pytest.raises(DataError, match=f"{deep}:1: nested too deeply"):
        read_jsonl(deep)
    bad_recipe = tmp_path / "latin1.yaml"
    bad_recipe.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(RecipeError, match=f"{bad_recipe}: not valid UTF-8"):
        load_recipe(str(bad_recipe))
    raw = tmp_path / "golds.jsonl"
    raw.write_text('{"id": "n", "problem": "p", "answer": NaN}\n{"id": "i", "problem": "p", "answer": Infinity}\n'
                   '{"id": null, "problem": "p", "answer": "1"}\n{"id": null, "problem": "q", "answer": "2"}\n'
                   '{"id": 7, "problem": "p", "answer": 3}\n')
    rows, skipped = clean_rows(read_jsonl(raw), str(raw))
    assert [(r["id"], r["answer"]) for r in rows] == [("7", "3")]
    assert skipped == {"non-finite answer (NaN or infinity)": 2, "id that is not a string or an integer (null, a list…)": 2}


def test_a_second_restart_keeps_the_complete_run_a_killed_restart_set_aside(tmp_path):
    """A --restart killed mid-run leaves the complete run in .<stage>.previous and the killed one in the stage
    folder; a second --restart that fails must not delete the complete run (it used to, and put the killed
    one back): it keeps it aside while it runs and restores it when it fails."""
    from stages.pipeline.manifest import Manifest
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import previous_dir

    recipe = load_recipe("tiny", [f"run_root={tmp_path}"])
    stage_dir = recipe.stage_dir("base")
    assert _fake_stage(recipe, tmp_path, _written("first")).status == "complete"
    stage_dir.rename(previous_dir(stage_dir))  # what the killed --restart left: the complete run aside …
    Manifest.start(stage_dir, "base", recipe)  # … and its own run, never finished

    def bad(ctx):
        raise ValueError("seed: -1 is not a seed")

    for _ in range(2):
        with pytest.raises(ValueError):
            _fake_stage(recipe, tmp_path, bad, restart=True)
        assert Manifest.load(stage_dir).status == "complete"
        assert (stage_dir / "checkpoint" / "weights.txt").read_text() == "first"
        assert not previous_dir(stage_dir).exists()
        stage_dir.rename(previous_dir(stage_dir))
        Manifest.start(stage_dir, "base", recipe)
    assert _fake_stage(recipe, tmp_path, _written("second"), restart=True).status == "complete"
    assert (stage_dir / "checkpoint" / "weights.txt").read_text() == "second"
    assert not previous_dir(stage_dir).exists()


def test_r1_eval_refuses_bad_arguments_before_any_work(tmp_path, monkeypatch, capsys):
    """Each of these gave a traceback (some after the sampling had run): each is now a one-line error
    naming the argument, before anything loads (a hub id with the hub unreachable fails at once)."""
    import time

    from stages.commands.cli import main

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    afile = tmp_path / "results.txt"
    afile.write_text("x")
    sets = ["--recipe", "tiny", "--set", f"run_root={tmp_path}"]
    cases = [
        (["--model", str(afile)], "a file, not a model folder"),
        (["--model", "nonexistent-org/nonexistent-model-xyz"], "no such local folder, and the hub is off"),
        (["--model", str(model), "--out", str(afile)], "--out"),
        (["--model", str(model), "--out", str(model)], "a model's folder"),
        (["--model", str(model), "--bench", ""], "--bench names no benchmark"),
        (["--model", str(model), "--min-think", "-3"], "must be >= 0"),
        (["--model", str(model), "--think-budget", "0"], "must be >= 1"),
    ]
    for argv, message in cases:
        t0 = time.time()
        try:
            code = main(["eval", *argv, *sets])
        except SystemExit as e:  # argparse's refusals
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, (argv, err)
        assert time.time() - t0 < 5
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")  # a hub nothing answers on
    assert main(["eval", "--model", "nonexistent-org/nonexistent-model-xyz", *sets]) == 2
    assert "the hub is unreachable from here" in capsys.readouterr().err
    assert not (model / "results.json").exists()


def test_a_corrupt_manifest_is_unreadable_naming_its_field_and_the_listing_goes_on(tmp_path, capsys):
    """A string where a metric number belongs, a checkpoint path outside the run folder, ``schema_version:
    true``: each stage is listed UNREADABLE with the field named, the others are listed as usual, nothing
    outside the run folder is walked, and the report is written."""
    import json
    import shutil
    import time

    from stages.commands.cli import main
    from stages.pipeline.recipe import load_recipe

    recipe = load_recipe("tiny", [f"run_root={tmp_path}"])
    assert _fake_stage(recipe, tmp_path, _written("first")).status == "complete"
    run = recipe.stage_dir("base").parent
    corruptions = {
        "stage1": lambda d: d["metrics"].setdefault("probe", {}).update({"pass@1": "high"}),
        "stage2": lambda d: d["metrics"].update({"wall_seconds": "long"}),
        "stage3": lambda d: d["output"].update({"checkpoint": "/usr/share"}),
        "stage4": lambda d: d.update({"schema_version": True}),
    }
    for stage, corrupt in corruptions.items():
        shutil.copytree(run / "base", run / stage)
        path = run / stage / "manifest.json"
        data = json.loads(path.read_text())
        data["stage"] = stage
        corrupt(data)
        path.write_text(json.dumps(data))
    t0 = time.time()
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert time.time() - t0 < 10
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "complete" in lines["base"]
    assert "UNREADABLE" in lines["stage1"] and "metrics.probe.pass@1" in lines["stage1"]
    assert "UNREADABLE" in lines["stage2"] and "metrics.wall_seconds" in lines["stage2"]
    assert "UNREADABLE" in lines["stage3"] and "outside the run folder" in lines["stage3"]
    assert "UNREADABLE" in lines["stage4"] and "schema_version True" in lines["stage4"]
    assert main(["report", str(run)]) == 0
    assert (run / "report" / "report.md").exists()

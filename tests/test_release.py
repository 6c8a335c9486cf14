"""Released bases (stages/release.py): the tiny base and the student's base ship with the repository and
are registered, not pretrained; a release whose files changed, or that this code and recipe would not
build, is refused before anything is written, naming what differs and the command that rebuilds it."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from stages.commands.cli import main
from stages.distill import student_base
from stages.pipeline.manifest import Manifest, hash_checkpoint
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import StageContext
from stages.release import (
    RELEASE_FILE,
    ReleaseError,
    build_student_release,
    read_release,
    register_release,
    student_recipe,
    write_release,
)
from stages.training.pretrain import build_key, build_settings, corpus_and_tokenizer, pretrain_tiny
from tests.micro import SMALL

pytestmark = pytest.mark.train  # the micro tests pretrain a base

STUDENT = ("distill.students=[{name: s1, release: RELEASE, architecture: {hidden_size: 16, num_hidden_layers: 1, "
           "num_attention_heads: 2, num_key_value_heads: 2, intermediate_size: 32, max_position_embeddings: 512, "
           "tokenizer_vocab_size: 640}, pretrain_steps: 5}]")


def micro_settings(tmp_path: Path) -> list[str]:
    """The micro base of the tests, released into ``tmp_path/release`` (base) and ``tmp_path/s1`` (student)."""
    return [*(s for s in SMALL if not s.startswith("base.release")), "base.pretrain.steps=8",
            f"run_root={tmp_path / 'runs'}", f"base.release={tmp_path / 'release'}",
            STUDENT.replace("RELEASE", str(tmp_path / "s1"))]


def micro(tmp_path: Path, *extra: str):
    return load_recipe("tiny", [*micro_settings(tmp_path), *extra])


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A micro base built and written as a release (as ``r1 base --rebuild`` writes it)."""
    tmp = tmp_path_factory.mktemp("release")
    recipe = micro(tmp)
    model, tokenizer, stats = pretrain_tiny(recipe, log=lambda *_: None)
    model.save_pretrained(tmp / "built")
    tokenizer.save_pretrained(tmp / "built")
    write_release(tmp / "built", tmp / "release", recipe, stats, what="a micro base")
    return tmp, recipe


def copy_of(released, tmp_path) -> Path:
    src, _ = released
    shutil.copytree(src / "release", tmp_path / "release")
    return tmp_path / "release"


def test_a_release_is_registered_with_its_files_and_build_key_verified(released, tmp_path):
    folder = copy_of(released, tmp_path)
    recipe = released[1]
    info = json.loads((folder / RELEASE_FILE).read_text())
    assert set(info["files"]) == {n for n in hash_checkpoint(folder) if n != RELEASE_FILE}
    assert info["build_key"] == build_key(recipe, *corpus_and_tokenizer(recipe))
    assert info["settings"] == json.loads(json.dumps(build_settings(recipe)))
    assert info["built"]["machine"]["cpu"] and info["built"]["threads"] == torch.get_num_threads()
    record = register_release(folder, recipe, tmp_path / "checkpoint", field="base.release")
    assert record["files_verified"] == len(info["files"]) and record["build_key"] == info["build_key"]
    assert hash_checkpoint(tmp_path / "checkpoint") == hash_checkpoint(folder)  # the release, copied whole
    assert (folder / "README.md").read_text().startswith("---")  # a model card


@pytest.mark.parametrize("change, reason", [
    ("flip a byte of the weights", "changed since it was built: model.safetensors"),
    ("delete the tokenizer", "missing: tokenizer.json"),
    ("add a file", "not in the release: extra.bin"),
    ("garble release.json", "is not a release record"),
    ("remove release.json", "holds no release.json"),
])
def test_a_changed_release_is_refused_before_anything_is_written(released, tmp_path, change, reason):
    folder = copy_of(released, tmp_path)
    if change == "flip a byte of the weights":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[-1] ^= 1
        (folder / "model.safetensors").write_bytes(bytes(data))
    elif change == "delete the tokenizer":
        (folder / "tokenizer.json").unlink()
    elif change == "add a file":
        (folder / "extra.bin").write_bytes(b"\0")
    elif change == "garble release.json":
        (folder / RELEASE_FILE).write_text("{not json")
    else:
        (folder / RELEASE_FILE).unlink()
    with pytest.raises(ReleaseError, match=reason) as e:
        register_release(folder, released[1], tmp_path / "checkpoint", field="base.release")
    assert "make rebuild-base" in str(e.value) and "base.release" in str(e.value)
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / ".checkpoint.tmp").exists()


def test_a_stale_release_is_refused_naming_what_differs(released, tmp_path, monkeypatch):
    """Another setting, another corpus, another tokenizer: each is a base this code would not build."""
    folder = copy_of(released, tmp_path)
    recipe = released[1]
    other = micro(tmp_path, "base.pretrain.learning_rate=2e-2")
    with pytest.raises(ReleaseError, match=r"stale.*base\.pretrain\.learning_rate: 0\.01 → 0\.02") as e:
        register_release(folder, other, tmp_path / "checkpoint", field="base.release")
    assert "corpus" not in str(e.value) and "rebuild-base" in str(e.value) and "base.release=null" in str(e.value)

    import stages.training.pretrain as pretrain

    real_corpus = pretrain.corpus_documents
    monkeypatch.setattr(pretrain, "corpus_documents", lambda *a, **k: real_corpus(*a, **k)[::-1])  # changed code
    with pytest.raises(ReleaseError, match="the corpus this code generates differs") as e:
        register_release(folder, recipe, tmp_path / "checkpoint", field="base.release")
    monkeypatch.setattr(pretrain, "corpus_documents", real_corpus)
    real_tokenizer = pretrain.build_tokenizer
    monkeypatch.setattr(pretrain, "build_tokenizer", lambda texts, vocab_size: real_tokenizer(texts, vocab_size - 8))
    with pytest.raises(ReleaseError, match="the tokenizer this code trains differs") as e:
        register_release(folder, recipe, tmp_path / "checkpoint", field="base.release")
    assert "corpus" not in str(e.value).split("tokenizer")[0]
    assert not (tmp_path / "checkpoint").exists()


def test_r1_base_rebuilds_then_registers_and_the_report_says_so(tmp_path, capsys):
    """``r1 base --rebuild`` writes the base's and the student's releases; ``r1 base`` then registers the
    base without pretraining (the manifest has no pretraining record, the report says registered), and
    refuses a tampered one with the rebuild command, exit code 2."""
    args = [x for setting in micro_settings(tmp_path) for x in ("--set", setting)]
    assert main(["base", *args, "--rebuild"]) == 0
    m = Manifest.load(tmp_path / "runs" / "tiny" / "base")
    assert "pretrain" in m.data["metrics"] and set(m.data["metrics"]["rebuilt"]) == {"base", "s1"}
    for folder in ("release", "s1"):
        read_release(tmp_path / folder, field="x", recipe_name="tiny")  # complete, files as recorded
    assert main(["base", *args, "--restart"]) == 0
    m = Manifest.load(tmp_path / "runs" / "tiny" / "base")
    assert "pretrain" not in m.data["metrics"] and m.data["metrics"]["release"]["release"] == str(tmp_path / "release")
    assert "probe" in m.data["metrics"]  # still measured on every run
    assert main(["report", str(tmp_path / "runs" / "tiny")]) == 0
    report = (tmp_path / "runs" / "tiny" / "report" / "report.md").read_text()
    assert "Base: registered, not built." in report and "Parallel layout" in report
    (tmp_path / "release" / "config.json").write_text("{}")
    capsys.readouterr()
    assert main(["base", *args, "--restart"]) == 2
    err = capsys.readouterr().err
    assert "changed since it was built: config.json" in err and "make rebuild-base" in err
    assert Manifest.load(tmp_path / "runs" / "tiny" / "base").status == "complete"  # the previous run, restored


def test_a_students_release_is_registered_by_distill(tmp_path):
    recipe = micro(tmp_path)
    student = recipe.distill.students[0]
    key = build_student_release(recipe, student)
    stage = tmp_path / "runs" / "tiny" / "distill"
    stage.mkdir(parents=True)
    ctx = StageContext(recipe, "distill", stage, Manifest.start(stage, "distill", recipe), None, False)
    path = student_base(ctx, student)
    record = ctx.manifest.data["metrics"]["students"]["s1"]["pretrain"]
    assert record["registered"]["build_key"] == key and record["parameters"] > 0
    assert hash_checkpoint(Path(path)) == hash_checkpoint(tmp_path / "s1")
    data = bytearray((tmp_path / "s1" / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "s1" / "model.safetensors").write_bytes(bytes(data))
    ctx.manifest.data["metrics"]["students"] = {}
    shutil.rmtree(path)
    with pytest.raises(ReleaseError, match=r"distill.students\[s1\].release: .*changed since it was built"):
        student_base(ctx, student)


def test_the_shipped_releases_are_the_bases_this_code_builds():
    """The tiny recipe's releases in the repository: their files as recorded, and the build key this code
    gives (a change to the corpus, the tokenizer or the pretraining settings fails here: rebuild them with
    ``make rebuild-base`` and commit the new releases)."""
    recipe = load_recipe("tiny")
    releases = [(recipe.base.release, recipe)] + [(s.release, student_recipe(recipe, s))
                                                   for s in recipe.distill.students if s.release]
    assert len(releases) == 2
    for folder, built_with in releases:
        info = read_release(Path(folder), field="release", recipe_name="tiny")
        assert info["build_key"] == build_key(built_with, *corpus_and_tokenizer(built_with)), folder
        assert info["settings"] == json.loads(json.dumps(build_settings(built_with))), folder


@pytest.mark.slow
def test_a_rebuild_gives_the_released_base_bit_for_bit(tmp_path):
    """Pretraining the tiny base from scratch again gives the released weights exactly, on the kind of
    machine it was built on (CPU model, bf16 kernels) with its thread count; elsewhere the sums differ by
    design, and the build key must still agree."""
    from stages.pipeline.manifest import device_info

    recipe = load_recipe("tiny")
    info = read_release(Path(recipe.base.release), field="base.release", recipe_name="tiny")
    built = info["built"]
    torch.set_num_threads(built["threads"])
    model, tokenizer, stats = pretrain_tiny(recipe, log=lambda *_: None)
    assert stats["build_key"] == info["build_key"]
    here = device_info()
    if (here["cpu"], here["bf16_kernels"]) != (built["machine"]["cpu"], built["machine"].get("bf16_kernels")):
        pytest.skip(f"built on {built['machine']['cpu']}, this is {here['cpu']}: the weights may differ")
    model.save_pretrained(tmp_path)
    released = load_file(str(Path(recipe.base.release) / "model.safetensors"))
    rebuilt = load_file(str(tmp_path / "model.safetensors"))
    assert released.keys() == rebuilt.keys()
    assert all(torch.equal(released[k], rebuilt[k]) for k in released)

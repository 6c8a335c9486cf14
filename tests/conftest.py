"""Test-wide settings and the shared fixtures.

One intra-op thread per test process: the models under test are tiny, so threads buy little, and on a
2-core machine shared with grading workers and subprocesses, oversubscribed OpenMP threads made steps
10x slower. Fixtures: ``small_base`` (a micro base for the session), ``base_run`` (a micro base per
module), ``chain`` (micro base and stage 1 per module). Tests that train a model are marked ``train``
(by these fixtures, or by their module's ``pytestmark``): ``pytest -m "not train"`` runs the rest.
"""

import atexit
import json
import os
import shutil
import tempfile

import pytest
import torch

from tests.micro import MICRO23, SMALL, USER_ROWS, recipe

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the subprocesses tests start
# No test may reach the hub; trackio's local database goes to a folder of this session (trackio reads
# TRACKIO_DIR when it is imported: before any test runs).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="r1-tests-trackio-")
atexit.register(shutil.rmtree, os.environ["TRACKIO_DIR"], True)

TRAINING_FIXTURES = {"small_base", "base_run", "chain"}


def pytest_collection_modifyitems(items):
    for item in items:
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.train)


@pytest.fixture(scope="session")
def small_base(tmp_path_factory):
    from stages.base import run
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import run_stage

    root = tmp_path_factory.mktemp("runs")
    recipe_ = load_recipe("tiny", SMALL + [f"run_root={root}"])
    manifest = run_stage(recipe_, "base", run)
    return recipe_, manifest


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A complete micro base stage under <tmp>/tiny/base."""
    import stages.base
    from stages.pipeline.runner import run_stage

    root = tmp_path_factory.mktemp("runs")
    m = run_stage(recipe(root), "base", stages.base.run)
    assert m.status == "complete"
    return root


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """<tmp>/tiny/{base,stage1} complete, and the user cold-start file."""
    import stages.base
    import stages.stage1_zero
    from stages.pipeline.runner import run_stage

    root = tmp_path_factory.mktemp("runs")
    user = root / "user_cot.jsonl"
    user.write_text("".join(json.dumps(r) + "\n" for r in USER_ROWS))
    r = recipe(root, extra=MICRO23)
    assert run_stage(r, "base", stages.base.run).status == "complete"
    assert run_stage(r, "stage1", stages.stage1_zero.run).status == "complete"
    return root, user

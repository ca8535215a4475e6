"""The wheel is enough: built from this tree, installed (not editable) into a fresh venv, it trains
from a folder outside the repository, so everything read at run time (the hyperparameter YAMLs, the
Mooncake sample trace) ships as package data.

The fresh venv gets the project from the wheel alone (pip --no-deps); its dependencies (torch, SB3,
...) come from the venv running the tests through a .pth line, which puts that venv's
site-packages after the fresh one's on sys.path. A .pth line adds a path without running that
folder's own .pth files, so the editable install of the test venv stays out of it; the test checks
that the packages import from the fresh venv. Slow (about 30-60 s: the build, and 2,048 PPO steps)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _fresh_venv(root: Path, env: dict[str, str]) -> Path:
    """A venv without pip and without system site-packages, seeing the test venv's site-packages
    last; its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--without-pip", str(root)], root.parent, env)
    python = root / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root.parent, env)
    Path(purelib.strip(), "test_venv_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_installs_and_trains_from_another_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # Built from a copy: setuptools leaves build/ in the source tree, and a stale build/lib there
    # would put files into the wheel that the package data no longer names.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "runs", "results", "*.egg-info", "__pycache__", ".pytest_cache"))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir",
          str(dist), str(source)], tmp_path, env)
    (wheel,) = dist.glob("radix_auction_gym-*.whl")
    python = _fresh_venv(tmp_path / "venv", env)
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
         tmp_path, env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(python), "-c", "import agents, auction_gym, experiments; "
                  "print(agents.__file__, auction_gym.__file__, experiments.__file__)"], work, env)
    assert all(str(tmp_path / "venv") in path for path in where.split()), where
    out = _run([str(tmp_path / "venv" / "bin" / "radix-auction"), "train", "--timesteps", "2000",
                "--eval-episodes", "1", "--no-progress"], work, env)
    assert (work / "runs" / "ppo_s0" / "model.zip").is_file()
    assert "final evaluation" in out
    # The Mooncake sample ships with the package, so `reproduce` finds its default trace installed.
    found = _run([str(python), "-c", "from experiments.commands.reproduce_trace import DEFAULT_TRACES; "
                  "print(*[p for p in DEFAULT_TRACES if p.is_file()])"], work, env)
    assert str(tmp_path / "venv") in found and "conversation_slice.jsonl" in found, found

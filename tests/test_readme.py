"""Every Python block of the README runs as written, in a fresh interpreter: the examples a newcomer
copies first stay true."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_python_examples():
    assert BLOCKS, "README.md has no ```python block"


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{k}" for k in range(len(BLOCKS))])
def test_a_readme_block_runs(code, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(README.parent), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "the example prints what it found"

"""The README's example runs as written and prints what the README says it will."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _example():
    spec = importlib.util.spec_from_file_location("first_pacer", ROOT / "examples" / "first_pacer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_states_the_example_s_ranges():
    example, readme = _example(), (ROOT / "README.md").read_text()
    assert "python examples/first_pacer.py" in readme
    for name, (low, high) in example.EXPECTED.items():
        stated = rf"PPO minus {re.escape(name)}\s+between {re.escape(f'{low:+.0f}')} and {re.escape(f'{high:+.0f}')}"
        assert re.search(stated, readme), name


def test_the_example_prints_differences_inside_the_stated_ranges(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # its run folder, runs/example, goes here
    example = _example()
    got = example.main()
    for name, (low, high) in example.EXPECTED.items():
        assert low <= got[name] <= high, (name, got[name])
    out = capsys.readouterr().out
    assert "PPO minus OGD" in out and (tmp_path / "runs" / "example" / "ppo" / "model.zip").is_file()

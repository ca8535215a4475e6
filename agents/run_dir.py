"""Run folders that never overwrite or mix with an earlier run.

Every training or evaluation run writes into a folder of its own. Asked for `runs/ppo_s0`, a run
takes that folder when it is absent or empty, else the first free one of `runs/ppo_s0_2`,
`runs/ppo_s0_3`, ... (RL Zoo numbers its runs the same way), so a second `train` never replaces the
first one's model or appends its TensorBoard curves to the first one's. Asked to overwrite, it
takes `runs/ppo_s0` itself after deleting what an earlier run wrote there (`RUN_OUTPUTS`), and
nothing else. Resuming continues in the run it resumes, on purpose (`agents.training`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

RUN_OUTPUTS = ("model.zip", "model.npz", "search.csv", "vecnormalize.pkl", "config.json", "checkpoint", "checkpoints", "eval",
               "events.out.tfevents.*")
"""What a run writes into its folder (glob patterns); `--overwrite` deletes these and only these."""


def new_run_dir(base: str | Path, overwrite: bool = False) -> Path:
    """A folder for a new run, created before it is returned (see the module docstring).

    The folder is claimed with an atomic `mkdir`, so two runs started at once never share one."""
    base = Path(base)
    if overwrite:
        clear_run_dir(base)
        base.mkdir(parents=True, exist_ok=True)
        return base
    if _claim(base) or (base.is_dir() and not any(base.iterdir())):
        return base
    k = 2
    while not _claim(base.with_name(f"{base.name}_{k}")):
        k += 1
    return base.with_name(f"{base.name}_{k}")


def clear_run_dir(path: str | Path) -> None:
    """Delete an earlier run's outputs (`RUN_OUTPUTS`) from `path`, keeping anything else."""
    path = Path(path)
    if not path.is_dir():
        return
    for pattern in RUN_OUTPUTS:
        for item in path.glob(pattern):
            shutil.rmtree(item) if item.is_dir() else item.unlink()


def _claim(path: Path) -> bool:
    """Create `path` (and its parents); False when it already exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        return False
    return True

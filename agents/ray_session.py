"""One Ray session per process, for RLlib training (`agents.rllib_training`) and for the sweeps that
run their tasks on Ray (`experiments.executor`). Ray is imported only when a session starts."""

from __future__ import annotations


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to the Ray cluster at `address` ("auto": the one this machine is part of), or
    start a local Ray with `num_cpus` cores (None: all) and no dashboard; a Ray this process has
    initialized already is used as it is."""
    import ray

    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False)

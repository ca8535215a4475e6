"""SB3 callbacks: periodic evaluation on fixed seeds logged as `eval/*`, and the HPARAMS tab."""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HParam

from .evaluation import DEFAULT_EVAL_SEED, METRICS, evaluate, mean_metrics
from .sb3 import SB3Policy


class EvalMetricsCallback(BaseCallback):
    """Every `eval_freq` environment steps (counted over all envs), evaluate the current policy
    deterministically on `episodes` episodes seeded `seed, seed + 1, ...` (the same seeds as
    `agents.evaluation.evaluate` uses for built-in policies) and log the mean of each metric as
    `eval/<metric>` at the current timestep. Also evaluates once at the end of training."""

    def __init__(self, env_kwargs: dict[str, Any], eval_freq: int, episodes: int = 5,
                 seed: int = DEFAULT_EVAL_SEED) -> None:
        super().__init__()
        if eval_freq < 1:
            raise ValueError(f"eval_freq must be >= 1, got {eval_freq}")
        self.env_kwargs, self.eval_freq, self.episodes, self.seed = env_kwargs, eval_freq, episodes, seed
        self._next = 0
        self._last_eval = -1

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._evaluate()
            self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq
        return True

    def _on_training_end(self) -> None:
        if self._last_eval != self.num_timesteps:
            self._evaluate()

    def _evaluate(self) -> None:
        policy = SB3Policy(self.model, self.model.get_vec_normalize_env())
        results = evaluate(policy, self.env_kwargs, self.episodes, self.seed, progress=False)
        for m, v in mean_metrics(results).items():
            self.logger.record(f"eval/{m}", v)
        self.logger.dump(self.num_timesteps)
        self._last_eval = self.num_timesteps


class HParamsCallback(BaseCallback):
    """Write the run's hyperparameters to TensorBoard's HPARAMS tab when training starts, with the
    `eval/*` tags and the mean training episode reward as its metrics."""

    def __init__(self, hparam_dict: dict[str, Any]) -> None:
        super().__init__()
        self.hparam_dict = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparam_dict.items()}

    def _on_training_start(self) -> None:
        metrics = {f"eval/{m}": 0.0 for m in METRICS} | {"rollout/ep_rew_mean": 0.0}
        self.logger.record("hparams", HParam(self.hparam_dict, metrics), exclude=("stdout", "log", "json", "csv"))

    def _on_step(self) -> bool:
        return True

"""SB3 callbacks: the market's metrics of every training episode (`MarketMetricsCallback`, for any
SB3 run), periodic evaluation on fixed seeds logged as `eval/*`, and the HPARAMS tab."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams.api_pb2 import Status
from tensorboard.plugins.hparams.metadata import PLUGIN_DATA_VERSION, PLUGIN_NAME, SESSION_END_INFO_TAG
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo
from torch.utils.tensorboard.summary import hparams

from auction_gym._checks import check_count, check_int
from auction_gym.envs.common import check_env_kwargs

from .evaluation import DEFAULT_EVAL_SEED, METRICS, episode_metrics, evaluate, mean_metrics
from .sb3 import ENV_ID, SB3Policy

OnEvaluation = Callable[[int, Sequence[dict[str, float]]], bool]
"""Called with each evaluation's timestep and per-episode metrics; False stops training (a
hyperparameter search's pruning, `agents.tuning`)."""


def market_episode_metrics(infos: Sequence[dict[str, Any]]) -> dict[str, float]:
    """One episode's `agents.evaluation.METRICS` (`episode_metrics`) from its steps' `info` dicts,
    and `mean_multiplier`, the mean of the multipliers the focal bidder played."""
    return {**episode_metrics(infos), "mean_multiplier": sum(i["multiplier"] for i in infos) / len(infos)}


class MarketMetricsCallback(BaseCallback):
    """Log the market's metrics of every training episode that ends, for any SB3 run on a
    RadixAuction env, VecEnvs included: `<prefix>/<metric>` for each of `agents.evaluation.METRICS`
    (the names `radix-auction train` logs as `eval/*`: utility, budget_spent_frac, payments,
    mean_latency, ...) and `<prefix>/mean_multiplier`, each the mean over the episodes that ended
    since SB3's last log dump (`Logger.record_mean`), as SB3's own `rollout/ep_rew_mean` is.

    The prefix is "rollout" by default, next to `ep_rew_mean`, not "eval": these are the training
    episodes, played with exploration noise on the training seeds, while `eval/*` is the
    deterministic policy on fixed evaluation seeds (`EvalMetricsCallback`); the same name for both
    would mix two measurements in one chart. The reward SB3 logs is scaled (`reward_scale`) and,
    for `reward="cost"` or "paired", not the utility at all; these metrics read the env's `info`.

        model.learn(10_000, callback=MarketMetricsCallback())

    `episodes` keeps every ended episode's metrics, in the order they ended."""

    def __init__(self, prefix: str = "rollout", verbose: int = 0) -> None:
        super().__init__(verbose)
        self.prefix = prefix
        self.episodes: list[dict[str, float]] = []
        self._steps: list[list[dict[str, Any]]] = []

    def _on_training_start(self) -> None:
        self._steps = [[] for _ in range(self.training_env.num_envs)]

    def _on_step(self) -> bool:
        for steps, info, done in zip(self._steps, self.locals["infos"], self.locals["dones"]):
            steps.append(info)
            if done:
                self._log(steps)
                steps.clear()
        return True

    def _log(self, infos: list[dict[str, Any]]) -> None:
        if "multiplier" not in infos[-1]:
            raise ValueError("MarketMetricsCallback needs a RadixAuction env (its info has no 'multiplier')")
        metrics = market_episode_metrics(infos)
        self.episodes.append(metrics)
        for name, value in metrics.items():
            self.logger.record_mean(f"{self.prefix}/{name}", value)


def log_evaluation(logger: Logger, policy: Any, env_kwargs: dict[str, Any], episodes: int, seed: int, step: int,
                   env_id: str = ENV_ID) -> list[dict[str, float]]:
    """Evaluate `policy` (`agents.evaluation.evaluate`, episodes seeded `seed + k`) and log the mean
    of each metric as `eval/<metric>` at `step`, the tags of every training run, SB3's or a policy
    search's; the per-episode metrics."""
    results = evaluate(policy, env_kwargs, episodes, seed, progress=False, env_id=env_id)
    for m, v in mean_metrics(results).items():
        logger.record(f"eval/{m}", v)
    logger.dump(step)
    return results


class EvalMetricsCallback(BaseCallback):
    """Evaluate the current policy deterministically on `episodes` episodes seeded `seed, seed + 1,
    ...` (the seeds `agents.evaluation.evaluate` uses for built-in policies) and log the mean of
    each metric as `eval/<metric>` at the current timestep.

    Evaluations happen when a rollout starts, i.e. after the policy was last updated, once at least
    `eval_freq` environment steps (counted over all envs) have passed since the previous one, and
    once at the end of training. So a policy is never evaluated twice between two updates: PPO
    updates once per rollout of n_steps x n_envs steps, and evaluating during the rollout would
    score the same policy again and again. `on_evaluation` (see `OnEvaluation`) may stop training
    after an evaluation; then no final one follows."""

    def __init__(self, env_kwargs: dict[str, Any], eval_freq: int, episodes: int = 5,
                 seed: int = DEFAULT_EVAL_SEED, env_id: str = ENV_ID,
                 on_evaluation: OnEvaluation | None = None) -> None:
        super().__init__()
        # Checked now: the first evaluation, which would meet a wrong one, comes after a tenth of the run.
        eval_freq, episodes = check_count("eval_freq", eval_freq), check_count("episodes", episodes)
        seed = check_int("seed", seed, 0)  # a Python int: Gymnasium's reset refuses numpy's
        check_env_kwargs(env_kwargs, env_id)
        self.env_kwargs, self.eval_freq, self.episodes, self.seed = env_kwargs, eval_freq, episodes, seed
        self.env_id, self.on_evaluation = env_id, on_evaluation
        self._next = 0
        self._continue = True
        self.steps: list[int] = []
        """The timesteps evaluated so far, in order."""
        self.last_results: list[dict[str, float]] = []
        """Per-episode metrics of the latest evaluation (the final one once training ends)."""

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq

    def _on_rollout_start(self) -> None:
        if self.num_timesteps >= self._next:
            self._evaluate()
            self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq

    def _on_step(self) -> bool:
        return self._continue

    def _on_training_end(self) -> None:
        if self._continue and (not self.steps or self.steps[-1] != self.num_timesteps):
            self._evaluate()

    def _evaluate(self) -> None:
        policy = SB3Policy(self.model, self.model.get_vec_normalize_env())
        self.last_results = log_evaluation(self.logger, policy, self.env_kwargs, self.episodes, self.seed,
                                           self.num_timesteps, self.env_id)
        self.steps.append(self.num_timesteps)
        if self.on_evaluation is not None:
            self._continue = bool(self.on_evaluation(self.num_timesteps, self.last_results))


RUN_STATUSES = {"success": "STATUS_SUCCESS", "interrupted": "STATUS_FAILURE", "failed": "STATUS_FAILURE"}
"""TensorBoard's HPARAMS status of a run that ended "success", "interrupted" (Ctrl-C) or "failed"
(an error): TensorBoard has no "interrupted", so both of the latter read "did not finish"."""


def session_end(status: str) -> Summary:
    """The HPARAMS summary that ends a run's session with `status` (a key of `RUN_STATUSES`)."""
    end = SessionEndInfo(status=Status.Value(RUN_STATUSES[status]))
    content = HParamsPluginData(session_end_info=end, version=PLUGIN_DATA_VERSION)
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name=PLUGIN_NAME, content=content.SerializeToString()))
    return Summary(value=[Summary.Value(tag=SESSION_END_INFO_TAG, metadata=metadata)])


class HParamsCallback(BaseCallback):
    """The run's hyperparameters in TensorBoard's HPARAMS tab, with the `eval/*` tags and the mean
    training episode reward as its metrics.

    The session's start is written when training starts and its end only when it ends, with its
    status (SB3's `HParam` writes "success" at the start, so an interrupted run would read as a
    finished one): `finish("success")` after a complete run, `finish("interrupted")` after Ctrl-C,
    `finish("failed")` after an error. TensorBoard's statuses have no "interrupted", so both of the
    latter are STATUS_FAILURE ("did not finish"); the text tag `run/status` tells them apart."""

    def __init__(self, hparam_dict: dict[str, Any]) -> None:
        super().__init__()
        self.hparam_dict = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparam_dict.items()}
        self._started = False

    def _on_training_start(self) -> None:
        self._started = True
        metrics = {f"eval/{m}": 0.0 for m in METRICS} | {"rollout/ep_rew_mean": 0.0}
        experiment, session_start, _ = hparams(self.hparam_dict, metrics)
        self._write(experiment, session_start)

    def _on_step(self) -> bool:
        return True

    def finish(self, status: str) -> None:
        """Write the session's end with `status` ("success", "interrupted" or "failed"); nothing
        when training never started."""
        if not self._started:
            return
        for fmt in self._tensorboards():
            fmt.writer.add_text("run/status", f"{status} at step {self.num_timesteps}", self.num_timesteps)
        self._write(session_end(status))

    def _write(self, *summaries: Summary) -> None:
        for fmt in self._tensorboards():
            for summary in summaries:
                fmt.writer.file_writer.add_summary(summary)
            fmt.writer.flush()

    def _tensorboards(self) -> list[TensorBoardOutputFormat]:
        return [fmt for fmt in self.logger.output_formats if isinstance(fmt, TensorBoardOutputFormat)]

"""Policy search with common random numbers: CMA-ES over a small deterministic pacing policy.

Why common random numbers: in the calibrated scenario (docs/design.md section 6) one episode's
focal utility has a standard deviation of about 450 while pacing policies differ by 50-100, so two
policies scored on different episodes are ranked mostly by their episodes' luck. A search that
scores each candidate on its own episodes, or compares this generation's incumbent with last
generation's on another batch, drifts. Here every generation plays one batch of episodes (the same
market seeds) with each of its candidates, the search distribution's mean (the incumbent) and the
best incumbent so far (the champion), so their differences are paired and the luck cancels.

- Policy (`SearchPolicy`): a = tanh(w . x + b) with x the observation divided by its upper bounds
  (the env's observation space, `auction_gym.market.Obs.high`), or with one hidden tanh layer of
  `hidden` units; mapped affinely onto the env's action box (the identity on Box(-1, 1)). Zero
  weights play a = 0: under `action_type="residual"` the env's base pacer exactly, under "delta" a
  held multiplier, under "log" truthful bidding. Deterministic; SB3's `predict` interface.
- Search (`generations`): CMA-ES (the `cma` package) from zero weights with step `sigma0` and
  `popsize` candidates a generation; a candidate's fitness is its mean focal utility
  (`info["utility"]`, realized, whatever the env's reward) over the generation's
  `episodes_per_generation` episodes. The champion is replaced by the incumbent when the incumbent
  beats it on the same batch; the champion is the model saved.
- Seeds (`search_seeds`): each generation's batch is drawn without replacement, from the training
  seed's own random stream, among seeds 0..`DEFAULT_EVAL_SEED` - 1 less the run's evaluation
  seeds; the search never plays an evaluation episode.
- Budget: `timesteps` environment steps over every episode the search plays (evaluation episodes
  are not counted, as SB3 does not count them), in whole generations, so a run compares with an SB3
  run at equal samples; the last generation may run past it (`TrainResult.trained`).

A run folder holds `model.npz` (the champion, the env kwargs and env id it was trained for),
`config.json`, `search.csv` (one row a generation, `Generation`), and TensorBoard events: `eval/*`
at `eval_freq` steps (the champion on the evaluation episodes, for reading only, never for
selection; `agents.callbacks.log_evaluation`, the tags SB3 runs log) and `search/*` each generation.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterator, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.logger import Logger, configure

from .callbacks import OnEvaluation, log_evaluation
from .evaluation import DEFAULT_EVAL_SEED
from .sb3 import check_action_kwargs, played_action_type
from .stats import mean_ci
from .training import TrainConfig, TrainResult, run_dir_of, run_settings, write_config


@dataclass(frozen=True)
class SearchParams:
    """The policy search's hyperparameters (`agents/hyperparams/cmaes.yml`, RL Zoo format)."""

    n_timesteps: int = 1_000_000
    """Environment steps when the run's config gives none."""
    popsize: int = 8
    """Candidates a generation (besides the incumbent and the champion)."""
    sigma0: float = 0.5
    """CMA-ES's initial step, in weights of the unit-scaled features."""
    episodes_per_generation: int = 24
    """Episodes of each generation's shared batch: every candidate plays all of them."""
    hidden: int = 0
    """Units of the policy's hidden layer; 0: linear."""
    n_envs: int = 1
    """RL Zoo's key, accepted for a uniform file format; the search plays one episode at a time."""

    @classmethod
    def of(cls, hyperparams: dict[str, Any]) -> SearchParams:
        """The parameters of a hyperparameter dict; ValueError names an unknown key or a bad value.
        `action_kwargs` (the action the policy plays, `agents.training.played_config`) is the run's,
        checked here and left out."""
        valid = [f.name for f in fields(cls)]
        if "action_kwargs" in hyperparams:
            check_action_kwargs(hyperparams["action_kwargs"])
            hyperparams = {k: v for k, v in hyperparams.items() if k != "action_kwargs"}
        for key, value in hyperparams.items():
            if key not in valid:
                raise ValueError(f"unknown hyperparameter {key!r} for a policy search; valid: "
                                 f"{', '.join([*valid, 'action_kwargs'])}")
            if key != "sigma0" and (isinstance(value, bool) or not float(value).is_integer()):
                raise ValueError(f"hyperparameter {key}={value!r} for a policy search: expected an integer")
        params = cls(**{k: (float(v) if k == "sigma0" else int(v)) for k, v in hyperparams.items()})
        if params.popsize < 2 or params.episodes_per_generation < 1 or params.hidden < 0 or not params.sigma0 > 0:
            raise ValueError(f"policy search hyperparameters out of range: {params} (popsize >= 2, "
                             "episodes_per_generation >= 1, hidden >= 0, sigma0 > 0)")
        return params


class SearchPolicy:
    """A deterministic policy of a weight vector (see the module docstring for its form)."""

    def __init__(self, params: np.ndarray, scale: np.ndarray, hidden: int = 0, low: float = -1.0,
                 high: float = 1.0, action_type: str | None = None) -> None:
        self.params = np.asarray(params, dtype=np.float64)
        self.action_type = action_type
        """The action type it was trained in, when known (a loaded model's), for `evaluate` to check."""
        self.scale = np.asarray(scale, dtype=np.float64)
        self.hidden, self.low, self.high = int(hidden), float(low), float(high)
        if self.params.shape != (self.size(len(self.scale), self.hidden),):
            raise ValueError(f"expected {self.size(len(self.scale), self.hidden)} weights for {len(self.scale)} "
                             f"features and {self.hidden} hidden units, got shape {self.params.shape}")

    @staticmethod
    def size(n_features: int, hidden: int = 0) -> int:
        """Weights of a policy on `n_features` features: w and b, or W1, b1, w2 and b2."""
        return n_features + 1 if hidden == 0 else hidden * (n_features + 2) + 1

    @classmethod
    def for_env(cls, env: gym.Env, hidden: int = 0) -> SearchPolicy:
        """The zero-weight policy (a = 0) for `env`'s observation and action boxes."""
        bound = np.asarray(env.observation_space.high, dtype=np.float64)
        scale = np.where(np.isfinite(bound) & (bound > 0), bound, 1.0)
        space = env.action_space
        return cls(np.zeros(cls.size(len(scale), hidden)), scale, hidden, float(space.low[0]), float(space.high[0]))

    def with_params(self, params: np.ndarray) -> SearchPolicy:
        return SearchPolicy(params, self.scale, self.hidden, self.low, self.high, self.action_type)

    @property
    def action_space(self) -> gym.spaces.Box:
        """The action box it acts in, for `agents.evaluation.evaluate` to check against the env's."""
        return gym.spaces.Box(self.low, self.high, (1,), np.float32)

    def act(self, observations: np.ndarray) -> np.ndarray:
        """Actions, shape (n, 1), for observations of shape (n, features) or (features,)."""
        x = np.asarray(observations, dtype=np.float64).reshape(-1, len(self.scale)) / self.scale
        p, d, h = self.params, len(self.scale), self.hidden
        if h == 0:
            z = x @ p[:d] + p[d]
        else:
            w1, b1, w2 = p[:h * d].reshape(h, d), p[h * d:h * d + h], p[h * d + h:h * d + 2 * h]
            z = np.tanh(x @ w1.T + b1) @ w2 + p[-1]
        half = (self.high - self.low) / 2
        return (self.low + half + half * np.tanh(z))[:, None].astype(np.float32)

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """SB3's interface: one observation -> one action, a batch -> a batch; `state` passes through."""
        actions = self.act(observation)
        return (actions if np.ndim(observation) > 1 else actions[0]), state

    def save(self, path: str | Path, env_kwargs: dict[str, Any], env_id: str) -> None:
        """Save to an npz file with the env kwargs and env id it was trained for."""
        np.savez(path, params=self.params, scale=self.scale, hidden=self.hidden, bounds=[self.low, self.high],
                 env_kwargs=json.dumps(env_kwargs), env_id=env_id)

    @classmethod
    def load(cls, path: str | Path) -> SearchPolicy:
        try:
            with np.load(path) as f:
                low, high = f["bounds"]
                action_type = played_action_type(json.loads(str(f["env_kwargs"])), str(f["env_id"]))
                return cls(f["params"], f["scale"], int(f["hidden"]), float(low), float(high), action_type)
        except (OSError, KeyError, ValueError, gym.error.Error) as e:
            raise ValueError(f"{path} is not a policy search's model.npz ({e})") from None


@dataclass(frozen=True)
class Generation:
    """One generation of the search (a row of search.csv); fitness in mean focal utility per episode
    on the generation's batch."""

    generation: int
    steps: int
    """Environment steps played so far, this generation's included."""
    champion: float
    """The champion's fitness on this batch, before the incumbent may replace it (the incumbent's
    own in the first generation, where they are one policy)."""
    incumbent: float
    best_candidate: float
    mean_candidate: float
    sigma: float
    gap_ci95: float
    """95% CI half-width of incumbent - (earlier) champion over the batch's episodes, paired; NaN
    when they are one policy. What a batch of this size can tell apart."""
    replaced: bool
    """The incumbent beat the champion on this batch and is the champion now."""
    first_seed: int
    """The batch's first seed (the batch is drawn at random; see `search_seeds`)."""


def search_seeds(eval_seed: int, eval_episodes: int) -> np.ndarray:
    """The seeds a search's batches are drawn from: 0..DEFAULT_EVAL_SEED - 1 less the run's
    evaluation seeds eval_seed..eval_seed + eval_episodes - 1."""
    seeds = np.arange(DEFAULT_EVAL_SEED)
    return seeds[(seeds < eval_seed) | (seeds >= eval_seed + eval_episodes)]


def play(policy: SearchPolicy, env: gym.Env, seed: int) -> tuple[float, int]:
    """One episode seeded `seed`: the focal bidder's realized utility and the steps played."""
    obs, _ = env.reset(seed=int(seed))
    utility, steps, done = 0.0, 0, False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy.act(obs)[0])
        utility += float(info["utility"])
        steps += 1
        done = terminated or truncated
    return utility, steps


def score(policies: Sequence[SearchPolicy], env: gym.Env, seeds: Sequence[int]) -> tuple[np.ndarray, int]:
    """Each policy's utility on each seed's episode (shape policies x seeds) and the steps played."""
    out, steps = np.zeros((len(policies), len(seeds))), 0
    for i, policy in enumerate(policies):
        for j, seed in enumerate(seeds):
            out[i, j], n = play(policy, env, seed)
            steps += n
    return out, steps


def generations(env: gym.Env, start: SearchPolicy, params: SearchParams, seed: int,
                pool: np.ndarray) -> Iterator[tuple[Generation, np.ndarray]]:
    """CMA-ES from `start`'s weights, without end: each generation's row and the champion's weights
    after it (see the module docstring)."""
    import cma

    if len(pool) < params.episodes_per_generation:
        raise ValueError(f"episodes_per_generation={params.episodes_per_generation} exceeds the {len(pool)} "
                         "seeds a search may play")
    es = cma.CMAEvolutionStrategy(start.params, params.sigma0,
                                  {"popsize": params.popsize, "seed": seed + 1, "verbose": -9})
    rng = np.random.default_rng(seed)
    champion, steps, g = start.params.copy(), 0, 0
    while True:
        seeds = rng.choice(pool, size=params.episodes_per_generation, replace=False)
        candidates = es.ask()
        incumbent = np.array(es.mean, dtype=np.float64)
        rivals = [incumbent] if np.array_equal(champion, incumbent) else [incumbent, champion]
        utility, played = score([start.with_params(w) for w in (*rivals, *candidates)], env, seeds)
        fitness, k = utility.mean(axis=1), len(rivals)
        es.tell(candidates, list(-fitness[k:]))
        replaced = k == 2 and fitness[0] > fitness[1]
        if replaced:
            champion = incumbent
        steps, g = steps + played, g + 1
        gap = mean_ci(utility[0] - utility[1])[1] if k == 2 else math.nan
        yield Generation(g, steps, float(fitness[k - 1]), float(fitness[0]),
                         float(fitness[k:].max()), float(fitness[k:].mean()), float(es.sigma), gap, bool(replaced),
                         int(seeds[0])), champion.copy()


def train_search(config: TrainConfig, callbacks: list | None = None,
                 on_evaluation: OnEvaluation | None = None) -> TrainResult:
    """Run the search of `config` (hyperparameters from its learner's file, `SearchParams`) and save
    the champion as `model.npz` in a new run folder. On KeyboardInterrupt, save the champion so far
    and raise SystemExit(130)."""
    if callbacks:
        raise ValueError(f"{config.algo} is a policy search: it takes no SB3 callbacks")
    if config.resume is not None:
        raise ValueError(f"--resume: {config.algo} starts afresh; resuming is for SB3 learners")
    hp, timesteps, n_envs = run_settings(config, SearchParams.n_timesteps)
    params = SearchParams.of(hp)
    pool = search_seeds(config.eval_seed, config.eval_episodes)
    env = gym.make(config.env_id, **config.env_kwargs)
    start = SearchPolicy.for_env(env, params.hidden)
    run_dir = run_dir_of(config)
    write_config(config, run_dir, hp, timesteps, n_envs)
    logger = configure(str(run_dir), ["tensorboard"])
    eval_freq = config.eval_freq or max(timesteps // 10, 1)
    rows, evaluated, results, champion = [], [], [], start.params
    model_path = run_dir / "model.npz"
    try:
        for row, champion in generations(env, start, params, config.seed, pool):
            rows.append(row)
            _record(logger, row)
            done = row.steps >= timesteps
            if done or row.steps // eval_freq > (evaluated[-1] if evaluated else 0) // eval_freq:
                results = log_evaluation(logger, start.with_params(champion), config.env_kwargs,
                                         config.eval_episodes, config.eval_seed, row.steps, config.env_id)
                evaluated.append(row.steps)
                done = done or (on_evaluation is not None and not on_evaluation(row.steps, results))
            else:
                logger.dump(row.steps)
            _checkpoint(config, run_dir, start.with_params(champion), rows)
            if done:
                break
    except KeyboardInterrupt:
        start.with_params(champion).save(model_path, config.env_kwargs, config.env_id)
        print(f"\ninterrupted at step {rows[-1].steps if rows else 0}; saved {model_path}")
        raise SystemExit(130) from None
    finally:
        write_generations(run_dir / "search.csv", rows)
        logger.close()
        env.close()
    start.with_params(champion).save(model_path, config.env_kwargs, config.env_id)
    # The search's start (zero weights: a = 0), what the row's gain is measured from (`compare`).
    initial = run_dir / "initial" / "model.npz"
    initial.parent.mkdir()
    start.save(initial, config.env_kwargs, config.env_id)
    return TrainResult(model_path, run_dir, timesteps, rows[-1].steps, tuple(evaluated), tuple(results),
                       initial_model_path=initial, env_kwargs=config.env_kwargs)


def _record(logger: Logger, row: Generation) -> None:
    """A generation's fitnesses and step as `search/*` scalars (written at the next dump)."""
    for key in ("champion", "incumbent", "best_candidate", "mean_candidate", "sigma"):
        logger.record(f"search/{key}", getattr(row, key))


def _checkpoint(config: TrainConfig, run_dir: Path, champion: SearchPolicy, rows: list[Generation]) -> None:
    """`checkpoints/<algo>_<steps>_steps.npz` when the generation crossed a `checkpoint_every` step."""
    every = config.checkpoint_every
    before = rows[-2].steps if len(rows) > 1 else 0
    if every and rows[-1].steps // every > before // every:
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        champion.save(run_dir / "checkpoints" / f"{config.algo}_{rows[-1].steps}_steps.npz", config.env_kwargs,
                      config.env_id)


def write_generations(path: Path, rows: Sequence[Generation]) -> None:
    """search.csv: one row a generation (`Generation`'s fields)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[f.name for f in fields(Generation)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)

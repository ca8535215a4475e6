"""Train a pacing agent with the project's tuned settings and compare it with the built-in pacers.

    python examples/first_pacer.py            # under a minute on 2 cores

PPO on `RadixAuction-v2` (one learning bidder, the *focal bidder*, sets its bid multiplier each
admission round against three OGD pacers), with the hyperparameters `radix-auction train` uses
(`agents/hyperparams/ppo.yml`, tuned with Optuna on tuning seeds). In v2 the action corrects the
tuned PI pacer (a proportional-integral controller on the multiplier's log), so the untrained
policy already plays that pacer. Every policy is then scored on the same evaluation episodes
(seeds 1000 and up, on which nothing was tuned), and each difference is paired over them: the
luck of an episode cancels. The market's metrics of the training episodes go to TensorBoard under
`rollout/` (`tensorboard --logdir runs/example`).
"""

from __future__ import annotations

import numpy as np

from agents.callbacks import MarketMetricsCallback
from agents.evaluation import evaluate
from agents.sb3 import load_hyperparams, load_policy
from agents.stats import mean_ci
from agents.training import TrainConfig, train
from auction_gym.pacing import TUNED_PI, make_policy

STEPS = 16_384
"""Four of the tuned PPO's rollouts (8 envs x 512 steps): enough to see where it goes, not to learn much."""
EPISODES = 30
EXPECTED = {"its untrained start": (-30.0, 30.0), "OGD": (40.0, 110.0), "the PI pacer": (-40.0, 20.0)}
"""The mean differences PPO minus each policy this script prints, as ranges: the README states them
before the run (results differ in their last digits across machines)."""


def paired(a: np.ndarray, b: np.ndarray) -> str:
    """Mean of a - b with its 95% t interval over the shared episodes."""
    mean, half = mean_ci(a - b)
    return f"{mean:+7.1f} ± {half:5.1f}"


def main() -> dict[str, float]:
    """Train, score, print; return the mean differences PPO minus each policy."""
    settings = load_hyperparams("ppo")
    print(f"PPO's tuned settings: n_envs {settings['n_envs']}, n_steps {settings['n_steps']}, "
          f"learning_rate {settings['learning_rate']:.2e}")
    config = TrainConfig(algo="ppo", timesteps=STEPS, logdir="runs/example", run_name="ppo", overwrite=True,
                         eval_freq=STEPS, eval_episodes=2, progress=False)
    result = train(config, callbacks=[MarketMetricsCallback()])
    policies = {"PPO": load_policy(result.model_path), "its untrained start": load_policy(result.initial_model_path),
                "OGD": make_policy("ogd"), "the PI pacer": make_policy(TUNED_PI)}
    utility = {name: np.array([e["utility"] for e in evaluate(p, episodes=EPISODES, progress=False)])
               for name, p in policies.items()}
    print(f"trained {result.trained:,} steps; focal utility per episode over {EPISODES} shared episodes:")
    for name, u in utility.items():
        print(f"  {name:<20} {u.mean():7.1f}")
    for name in EXPECTED:
        print(f"PPO minus {name:<20} {paired(utility['PPO'], utility[name])}")
    return {name: float((utility["PPO"] - utility[name]).mean()) for name in EXPECTED}


if __name__ == "__main__":
    main()

"""Ray RLlib plumbing: the PettingZoo env as RLlib's multi-agent env, PPO configured as SB3's PPO is
here, with one policy shared by all bidders or one per bidder, and trained RLModules as policies
with SB3's `predict`, so `agents.evaluation` and `agents.population` evaluate them like any other.

Ray is an optional extra (`pip install -e ".[rllib]"`): only this module, `agents.rllib_training`
and the commands that train or load RLlib policies import it; the SB3 path never does.

Policy sharing (`SHARING`): "shared" trains one RLModule, `SHARED_MODULE`, on every bidder's
experience (parameter sharing: each env step gives it one sample per bidder); "per_bidder" trains
one RLModule per bidder, named as the agent ("bidder_0", ...), on that bidder's experience alone.

A checkpoint (`Algorithm.save_to_path`) keeps each RLModule under
`<checkpoint>/learner_group/learner/rl_module/<module id>/`; `load_population` reads them there
without starting Ray.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.rllib.utils.spaces.space_utils import unsquash_action
from stable_baselines3 import PPO

from auction_gym import RadixAuctionParallelEnv

from .population import agent_names
from .sb3 import algo_kwargs, load_hyperparams

SHARED_MODULE = "shared"
"""The one RLModule of every bidder under "shared" sharing."""


def shared_module(agent_id: str, *args: Any, **kwargs: Any) -> str:
    """Policy mapping of "shared": every bidder acts through `SHARED_MODULE`."""
    return SHARED_MODULE


def own_module(agent_id: str, *args: Any, **kwargs: Any) -> str:
    """Policy mapping of "per_bidder": each bidder acts through the module named as itself."""
    return agent_id


SHARING = {"shared": shared_module, "per_bidder": own_module}
"""RLlib's `policy_mapping_fn` (agent id, episode -> module id) of each policy sharing."""
_FROM_SB3 = {"learning_rate": "lr", "n_steps": "train_batch_size_per_learner", "batch_size": "minibatch_size",
             "n_epochs": "num_epochs", "gamma": "gamma", "gae_lambda": "lambda_", "clip_range": "clip_param",
             "ent_coef": "entropy_coeff", "vf_coef": "vf_loss_coeff", "max_grad_norm": "grad_clip"}
"""SB3 PPO's arguments and the RLlib `PPOConfig.training` arguments that mean the same."""


class RadixAuctionMultiAgentEnv(ParallelPettingZooEnv):
    """`RadixAuctionParallelEnv` as RLlib's MultiAgentEnv, built from RLlib's env config (the
    PettingZoo env's keyword arguments)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(RadixAuctionParallelEnv(**dict(config or {})))


def module_ids(sharing: str, agents: Sequence[str]) -> list[str]:
    """The RLModules that `sharing` trains for `agents`, in order; ValueError for an unknown one."""
    if sharing not in SHARING:
        raise ValueError(f"unknown policy sharing {sharing!r}; valid: {', '.join(SHARING)}")
    return list(dict.fromkeys(SHARING[sharing](agent) for agent in agents))


def sb3_ppo_settings() -> tuple[dict[str, Any], DefaultModelConfig]:
    """RLlib PPO's `training()` arguments and model equal to SB3's PPO as `radix-auction train
    --algo ppo` sets it up: `agents/hyperparams/ppo.yml` over SB3's defaults, with `n_steps` environment
    steps per update (each gives every bidder a sample), and separate tanh policy and value MLPs
    of the YAML's `net_arch` with a state-independent log std. SB3 clips no value loss and adds no
    KL penalty, so neither does this. Not carried over: the YAML's `normalize` (SB3's
    VecNormalize of observations and rewards; the observation is already scaled, see `Obs`)."""
    params = inspect.signature(PPO.__init__).parameters
    hp = {**{k: params[k].default for k in _FROM_SB3}, **algo_kwargs(load_hyperparams("ppo"))}
    training = {rllib: hp[sb3] for sb3, rllib in _FROM_SB3.items()}
    training.update(vf_clip_param=float("inf"), use_kl_loss=False)
    net_arch = hp.get("policy_kwargs", {}).get("net_arch", [64, 64])
    hidden = net_arch["pi"] if isinstance(net_arch, dict) else net_arch
    return training, DefaultModelConfig(fcnet_hiddens=list(hidden), fcnet_activation="tanh", vf_share_layers=False,
                                        free_log_std=True)


def training_keys() -> list[str]:
    """The arguments `PPOConfig.training` takes, the valid `--hyperparams` keys."""
    names = {*inspect.signature(PPOConfig.training).parameters, *inspect.signature(AlgorithmConfig.training).parameters}
    return sorted(names - {"self", "kwargs"})


def ppo_config(env_kwargs: dict[str, Any], sharing: str = "shared", num_env_runners: int = 0, seed: int = 0,
               overrides: dict[str, Any] | None = None, num_learners: int = 0) -> PPOConfig:
    """PPO on the PettingZoo env with `env_kwargs` (RLlib's new API stack): `sb3_ppo_settings`
    with `overrides` (`PPOConfig.training` arguments) on top, `sharing`'s modules and mapping,
    `num_env_runners` sampling actors (0: sample in this process) and `num_learners` learner
    actors (0: learn in this process; each learner updates on its own batch of
    `train_batch_size_per_learner` steps), seeded `seed`. ValueError for an unknown override or
    sharing."""
    if unknown := sorted(set(overrides or {}) - set(training_keys())):
        raise ValueError(f"unknown RLlib PPO training argument(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(training_keys())}")
    training, model = sb3_ppo_settings()
    ids = module_ids(sharing, agent_names(env_kwargs))
    return (PPOConfig()
            .environment(RadixAuctionMultiAgentEnv, env_config=dict(env_kwargs))
            .env_runners(num_env_runners=num_env_runners)
            .learners(num_learners=num_learners)
            .training(**{**training, **(overrides or {})})
            .multi_agent(policies=set(ids), policy_mapping_fn=SHARING[sharing])
            .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={m: RLModuleSpec() for m in ids}),
                       model_config=model)
            .debugging(seed=seed))


class RLlibPolicy:
    """A trained RLModule as a policy on raw observations: the deterministic action of its
    inference distribution (a Gaussian's mean), mapped into the action space as RLlib's env
    runners map it by default (`normalize_actions`: from [-1, 1] onto the bounds, then clipped).
    Stateless, so one instance may act for several bidders."""

    def __init__(self, module: RLModule) -> None:
        self.module = module

    @property
    def action_space(self) -> gym.spaces.Space:
        """The action space the module was trained in, for evaluation to check against the env's."""
        return self.module.action_space

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation, dtype=np.float32)
        with torch.no_grad():
            out = self.module.forward_inference({Columns.OBS: torch.from_numpy(obs.reshape(-1, obs.shape[-1]))})
            dist = self.module.get_inference_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            action = (dist.to_deterministic() if deterministic else dist).sample().numpy()
        action = unsquash_action(action, self.action_space)
        return (action if obs.ndim == 2 else action[0]), state


def algorithm_population(algo: Algorithm, sharing: str, agents: Sequence[str]) -> dict[str, RLlibPolicy]:
    """The policies an algorithm's bidders act through now (its local env runner's modules, which
    hold the learner's weights after each training iteration)."""
    policies = {m: RLlibPolicy(algo.get_module(m)) for m in module_ids(sharing, agents)}
    return {agent: policies[SHARING[sharing](agent)] for agent in agents}


def load_population(checkpoint: str | Path, agents: Sequence[str]) -> dict[str, RLlibPolicy]:
    """Each of `agents`' trained policy from an algorithm checkpoint: the shared module when the
    checkpoint has one, else the module named as the agent. ValueError for a folder that is not
    an RLlib algorithm checkpoint or lacks an agent's module."""
    # Absolute: RLlib reads checkpoints through pyarrow's filesystems, which take a relative path for a bad URI.
    root = Path(checkpoint).resolve() / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE
    if not root.is_dir():
        raise ValueError(f"{checkpoint} is not an RLlib algorithm checkpoint: it has no "
                         f"{COMPONENT_LEARNER_GROUP}/{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}/")
    saved = {p.name: p for p in root.iterdir() if p.is_dir()}
    sharing = "shared" if SHARED_MODULE in saved else "per_bidder"
    if missing := sorted(set(module_ids(sharing, agents)) - set(saved)):
        raise ValueError(f"{checkpoint} has no module for {', '.join(missing)}; it has {', '.join(sorted(saved))}")
    policies = {m: RLlibPolicy(RLModule.from_checkpoint(saved[m])) for m in module_ids(sharing, agents)}
    return {agent: policies[SHARING[sharing](agent)] for agent in agents}

"""Bidding policies. All answer SB3's `predict(observation, state=None, episode_start=None,
deterministic=True) -> (action, state)`, so evaluation treats built-in and learned policies alike.

OGD pacing, truthful and fixed-multiplier bidding are implemented in `auction_gym.pacing` (the
environments run them for the bidders that are not learning, and `auction_gym` never imports
`agents`); they are exported here as the agents' public names. They output bid multipliers;
`focal_policy(policy, env)` maps them to an environment's actions, and `agents.evaluation.evaluate`
scores them in multipliers.

Stable-Baselines3 helpers live in submodules, imported on use so that `import agents` stays light:
`agents.learners` (every learner by name), `agents.training` (train, resume, checkpoints),
`agents.policy_search` (CMA-ES on shared episodes), `agents.tuning` (Optuna hyperparameter
search), `agents.evaluation` (fixed-seed evaluation and the
shared `eval/*` TensorBoard tags), `agents.sb3` (algorithms, envs, loading a saved zip as a policy),
`agents.callbacks`, and `agents.stats` (confidence intervals). Every bidder at once:
`agents.population` (a population of policies on the PettingZoo env, evaluated on fixed seeds) and,
with the `rllib` extra, `agents.rllib` and `agents.rllib_training` (RLlib PPO over that env), the
only modules that import Ray.
"""

from auction_gym.pacing import FixedMultiplier, MultiplierPolicy, OGDPacer, Policy, Truthful, focal_policy, make_policy

__all__ = ["FixedMultiplier", "MultiplierPolicy", "OGDPacer", "Policy", "Truthful", "focal_policy", "make_policy"]

"""Hyper-parameters and the policy's spec: what a run chooses, validated once.

Each default's measurement is in the decision log (``docs/decisions.md#<anchor>``); the
maths the PPO settings belong to is in ``docs/algorithm.md``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The discount factor, named once: PPO's returns and an actor's running return (the reward
# scale) must discount alike.
DEFAULT_GAMMA = 0.995


class PPOHyper(BaseModel):
    """PPO hyper-parameters (CleanRL ``ppo_continuous_action`` defaults) + IS correction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 0.995, not CleanRL's 0.99: on Hopper a 100-step horizon undervalues staying up, and a
    # run could settle into a gait that speeds up and falls sooner (docs/decisions.md#gamma-0995).
    gamma: float = Field(DEFAULT_GAMMA, ge=0.0, le=1.0)
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    clip_coef: float = Field(0.2, gt=0.0)
    # A small entropy bonus (CleanRL's default is 0): without it our policy narrowed faster
    # than RLlib's and stalled on some seeds (docs/decisions.md#ent-coef-0003).
    ent_coef: float = Field(0.003, ge=0.0)
    vf_coef: float = Field(0.5, ge=0.0)
    max_grad_norm: float = Field(0.5, gt=0.0)
    update_epochs: int = Field(10, ge=1)
    num_minibatches: int = Field(32, ge=1)
    norm_adv: bool = True
    # Over what ``norm_adv`` standardizes the advantages: each minibatch (CleanRL: 64 samples
    # here) or the whole batch once, before the epochs (RLlib's GAE connector: 2,048 samples).
    norm_adv_scope: Literal["minibatch", "batch"] = "minibatch"
    clip_vloss: bool = True
    learning_rate: float = Field(3e-4, gt=0.0)
    # CleanRL's ``target_kl``: end a learner's update after the first epoch whose minibatches'
    # mean approx_kl exceeds it (measured from the policy PPO's ratio is taken against: the
    # update's start with ``decoupled``, the behaviour policy otherwise); None: every epoch.
    # It stops the late updates that collapse the policy's entropy
    # (docs/decisions.md#target-kl-002). RLlib's matched baseline has no counterpart.
    target_kl: float | None = Field(0.02, gt=0.0)
    # CleanRL's ``anneal_lr``: decay the learning rate linearly towards 0 over the run's budget
    # (functions/ppo.py::annealed_lr). The orchestrator resolves it per learner invocation and
    # sends the result as ``learning_rate``; off by default, as RLlib's PPO, our baseline, does
    # not anneal (the benchmarks' hyper-parameters are matched).
    anneal_lr: bool = False
    # decoupled: PPO's clip centred on the learner's starting policy, the paper's truncated
    # weight R' for the off-policy part; exactly PPO on fresh data
    # (docs/decisions.md#is-correction-decoupled, docs/algorithm.md#ratios-and-is-truncation).
    is_correction: Literal["none", "truncate", "vtrace", "decoupled"] = "decoupled"
    rho_bar: float = Field(1.0, ge=1.0)  # the paper's cap; >= 1 by definition
    c_bar: float = Field(1.0, gt=0.0)
    # Whose critic the GAE targets use: the values the actor recorded while sampling
    # (CleanRL; exact for fresh data), or the learner's critic at the start of its batch
    # (one forward pass; with stale data the behaviour critic is one batch out of date:
    # docs/decisions.md#gae-values-learner).
    gae_values: Literal["behaviour", "learner"] = "learner"


# Per-env defaults: where the global defaults, chosen on Hopper, did not serve an env. They
# sit under every choice a run makes (a config's or a flag's hyper field wins); each has its
# decision entry.
ENV_HYPER: dict[str, dict[str, Any]] = {
    # The entropy bonus that kept the policy from collapsing into the ~1,650 gait
    # (docs/decisions.md#halfcheetah-ent-coef).
    "HalfCheetah-v5": {"ent_coef": 0.005},
    # No entropy bonus: with it the paper's path widened its policy while sync PPO's did not
    # (docs/decisions.md#humanoid-ent-coef).
    "Humanoid-v5": {"ent_coef": 0.0},
}


def env_hyper(env_id: str, **fields: Any) -> PPOHyper:
    """PPOHyper for ``env_id``: its defaults (:data:`ENV_HYPER`) under ``fields``."""
    return PPOHyper(**{**ENV_HYPER.get(env_id, {}), **fields})


class PolicySpec(BaseModel):
    """Architecture and normalisation of a policy; published with every version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu"] = "tanh"
    init_log_std: float = 0.0
    obs_norm: bool = True
    reward_scaling: bool = True
    obs_clip: float = Field(10.0, gt=0.0)
    reward_clip: float = Field(10.0, gt=0.0)

    @field_validator("hidden_sizes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(int(h) < 1 for h in v):
            raise ValueError("hidden_sizes must be a non-empty list of positive ints")
        return v

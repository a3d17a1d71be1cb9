"""The behaviour policy as an actor steps its envs: ``ActorCritic.sample`` at env-step size.

An actor calls its policy once per vector-env step on a handful of rows (8 on Hopper). At that
size torch's per-op dispatch (a few µs an op, ~20 ops for the two 64x64 MLPs and the
Gaussian's draw and log-prob) costs three times the arithmetic: ~95 µs a step against ~30 µs
for the same maths on NumPy copies of the weights, ~8 µs of the ~150 µs an env step costs an
actor on Hopper-v5. The learner recomputes log-probs and values with the torch module; the
two agree to float32 rounding (``tests/functions/test_behaviour.py``), so importance ratios
of fresh data stay 1.

The Gaussian noise is drawn from the same seeded ``torch.Generator`` as ``ActorCritic.sample``
draws it, so an invocation's actions are those the torch path would take. Discrete action
spaces keep the torch path: their envs are cheap and the categorical draw is one op.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from functions.policy import _HALF_LOG_2PI, ActorCritic

# (action as stored, log-prob, value, action as the env takes it) for a batch of observations.
Step = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Sampler = Callable[[np.ndarray], Step]

_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda h: np.maximum(h, 0.0),
}


def _layers(mlp: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
    # (in, out)-major copies: ``h @ W`` on contiguous rows, and a snapshot — a module updated
    # in place later (a new version) does not change a sampler built before.
    return [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
            for m in mlp if isinstance(m, nn.Linear)]


class _NumpyGaussian:
    """Diagonal-Gaussian ``sample`` of a continuous-action ActorCritic, in NumPy."""

    def __init__(self, model: ActorCritic, generator: torch.Generator) -> None:
        self.actor = _layers(model.actor)
        self.critic = _layers(model.critic)
        self.activation = _ACTIVATIONS[model.spec.activation]
        self.logstd = model.actor_logstd.detach().numpy().copy()
        self.std = np.exp(self.logstd)
        self.logp_const = -(self.logstd + _HALF_LOG_2PI).sum()
        self.low, self.high = model.low.numpy(), model.high.numpy()
        self.generator = generator

    def _mlp(self, layers: list[tuple[np.ndarray, np.ndarray]], h: np.ndarray) -> np.ndarray:
        for weight, bias in layers[:-1]:
            h = self.activation(h @ weight + bias)
        weight, bias = layers[-1]
        return h @ weight + bias

    def __call__(self, obs: np.ndarray) -> Step:
        mean = self._mlp(self.actor, obs)
        value = self._mlp(self.critic, obs)[:, 0]
        noise = torch.randn(mean.shape, generator=self.generator, dtype=torch.float32).numpy()
        action = mean + self.std * noise
        logp = -0.5 * np.square(noise).sum(-1) + self.logp_const
        return action, logp, value, np.clip(action, self.low, self.high)


class _TorchSampler:
    """``ActorCritic.sample`` as it is (discrete actions)."""

    def __init__(self, model: ActorCritic, generator: torch.Generator) -> None:
        self.model, self.generator = model, generator

    def __call__(self, obs: np.ndarray) -> Step:
        with torch.inference_mode():
            action, logp, value = self.model.sample(torch.from_numpy(obs), generator=self.generator)
            return action.numpy(), logp.numpy(), value.numpy(), self.model.env_action(action)


def behaviour_sampler(model: ActorCritic, generator: torch.Generator) -> Sampler:
    """A sampler of ``model`` as it is now, drawing its noise from ``generator``."""
    if model.discrete:
        return _TorchSampler(model, generator)
    return _NumpyGaussian(model, generator)

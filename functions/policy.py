"""The actor-critic policy (CleanRL ``ppo_continuous_action`` / ``ppo`` architecture).

Separate actor and critic MLPs with orthogonal init; a diagonal Gaussian with a
state-independent log-std for ``Box`` actions (actions are clipped to the bounds only when
stepping the env: the stored action and its log-prob are the unclipped sample, as with
CleanRL's ``ClipAction``), a categorical for ``Discrete`` actions.

A published policy version is the module's parameters (keyed by ``named_parameters()``
names) *plus* the observation and return normaliser statistics, and a meta document
(:func:`policy_meta`) from which any process can rebuild the module with the store alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from functions.envs import space_info
from functions.hyper import PolicySpec
from functions.normalizer import RunningMeanStd
from functions.wire import Layout
from store.errors import CorruptBlob

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
_RMS_KEYS = ("mean", "var", "count")
_HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


def layer_init(layer: nn.Linear, std: float = float(np.sqrt(2)), bias: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias)
    return layer


def _mlp(sizes: list[int], activation: type[nn.Module], out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 2):
        layers += [layer_init(nn.Linear(sizes[i], sizes[i + 1])), activation()]
    layers.append(layer_init(nn.Linear(sizes[-2], sizes[-1]), std=out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Actor and critic MLPs over the (normalised) observation vector."""

    def __init__(
        self,
        obs_dim: int,
        action_space: Mapping[str, Any],
        spec: PolicySpec | None = None,
        env_id: str = "",
    ) -> None:
        super().__init__()
        self.spec = spec or PolicySpec()
        self.env_id = env_id
        self.obs_dim = int(obs_dim)
        self.action_space = dict(action_space)
        self.discrete = self.action_space["type"] == "discrete"
        act = _ACTIVATIONS[self.spec.activation]
        hidden = list(self.spec.hidden_sizes)
        self.critic = _mlp([self.obs_dim, *hidden, 1], act, out_std=1.0)
        if self.discrete:
            self.act_dim = int(self.action_space["n"])
            self.actor = _mlp([self.obs_dim, *hidden, self.act_dim], act, out_std=0.01)
        else:
            self.act_dim = int(self.action_space["shape"][0])
            self.actor = _mlp([self.obs_dim, *hidden, self.act_dim], act, out_std=0.01)
            self.actor_logstd = nn.Parameter(torch.full((self.act_dim,), self.spec.init_log_std))
            self.register_buffer("low", torch.tensor(self.action_space["low"]), persistent=False)
            self.register_buffer("high", torch.tensor(self.action_space["high"]), persistent=False)

    # -- distributions ----------------------------------------------------------------------
    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def distribution(self, x: torch.Tensor) -> Normal | Categorical:
        out = self.actor(x)
        if self.discrete:
            return Categorical(logits=out)
        return Normal(out, self.actor_logstd.expand_as(out).exp())

    def log_prob_entropy(
        self, x: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) and the entropy, summed over action dimensions."""
        if self.discrete:
            dist = self.distribution(x)
            return dist.log_prob(action.long()), dist.entropy()
        # The diagonal Gaussian in closed form, as :meth:`sample` computes it: building a
        # ``torch.distributions.Normal`` (argument checks, log of exp(log-std)) cost more than
        # the 64x64 MLP at minibatch 64, on every learner minibatch.
        mean = self.actor(x)
        logstd = self.actor_logstd.expand_as(mean)
        z = (action - mean) * torch.exp(-logstd)
        logp = (-0.5 * z.square() - logstd - _HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + self.actor_logstd).sum().expand(logp.shape)
        return logp, entropy

    def get_action_and_value(
        self,
        x: torch.Tensor,
        action: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log-prob, entropy, value); samples when ``action`` is None (CleanRL API)."""
        dist = self.distribution(x)
        if action is None:
            if self.discrete:
                action = torch.multinomial(dist.probs, 1, generator=generator).squeeze(-1)
            else:
                noise = torch.randn(dist.loc.shape, generator=generator, dtype=dist.loc.dtype)
                action = dist.loc + dist.scale * noise
        if self.discrete:
            logp, ent = dist.log_prob(action.long()), dist.entropy()
        else:
            logp, ent = dist.log_prob(action).sum(-1), dist.entropy().sum(-1)
        return action, logp, ent, self.get_value(x)

    def sample(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log-prob, value) for stepping envs: the same maths as
        :meth:`get_action_and_value` without building ``torch.distributions`` objects (their
        argument checks cost more than the 64x64 MLP at batch 8)."""
        out = self.actor(x)
        value = self.critic(x).squeeze(-1)
        if self.discrete:
            logits = torch.log_softmax(out, dim=-1)
            action = torch.multinomial(logits.exp(), 1, generator=generator)
            return action.squeeze(-1), logits.gather(-1, action).squeeze(-1), value
        logstd = self.actor_logstd.expand_as(out)
        noise = torch.randn(out.shape, generator=generator, dtype=out.dtype)
        action = out + logstd.exp() * noise
        logp = (-0.5 * noise.square() - logstd - _HALF_LOG_2PI).sum(-1)
        return action, logp, value

    def deterministic_action(self, x: torch.Tensor) -> torch.Tensor:
        out = self.actor(x)
        return out.argmax(-1) if self.discrete else out

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """The action as the env takes it: clipped to the Box bounds, ints for Discrete."""
        if self.discrete:
            return action.detach().cpu().numpy().astype(np.int64)
        return torch.clamp(action.detach(), self.low, self.high).cpu().numpy()


# -- the policy as tensors ----------------------------------------------------------------------
def policy_meta(model: ActorCritic) -> dict[str, Any]:
    """What a process needs to rebuild ``model`` from the store alone."""
    return {
        "env_id": model.env_id,
        "spec": model.spec.model_dump(),
        "obs_dim": model.obs_dim,
        "action_space": model.action_space,
    }


def param_layout(model: nn.Module) -> Layout:
    """``(name, shape)`` of every parameter in ``named_parameters()`` order: how a flat
    gradient or parameter vector of ``model`` splits back into tensors."""
    return tuple((n, tuple(p.shape)) for n, p in model.named_parameters())


def flatten_parameters(model: nn.Module) -> tuple[nn.Parameter, dict[str, slice]]:
    """Make every parameter of ``model`` a view into one flat vector, returned as a leaf
    ``Parameter`` with each name's slice.

    Adam is elementwise, so one fused step on the flat vector is the same update as
    per-parameter Adam in ~10 tensor ops instead of ~10 per parameter; and a flat gradient
    from the wire applies without a split. Loading weights (``copy_`` into the parameters)
    keeps the views; moving the module to another device does not.
    """
    named = dict(model.named_parameters())
    flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in named.values()]))
    slices: dict[str, slice] = {}
    offset = 0
    for name, p in named.items():
        slices[name] = slice(offset, offset + p.numel())
        p.data = flat.data[slices[name]].view_as(p)
        offset += p.numel()
    return flat, slices


def build_policy(meta: Mapping[str, Any]) -> ActorCritic:
    """An (untrained) module of the shape a published version's meta describes."""
    try:
        return ActorCritic(
            int(meta["obs_dim"]),
            meta["action_space"],
            PolicySpec.model_validate(meta.get("spec", {})),
            env_id=str(meta.get("env_id", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptBlob(f"policy meta cannot describe a policy: {exc!r}") from exc


def policy_tensors(
    model: ActorCritic, obs_rms: RunningMeanStd | None, ret_rms: RunningMeanStd | None
) -> dict[str, np.ndarray]:
    """Parameters (by ``named_parameters()`` name) plus ``obs_rms.*``/``ret_rms.*`` stats."""
    out = {n: p.detach().cpu().numpy().astype(np.float32).copy()
           for n, p in model.named_parameters()}
    obs_rms = obs_rms or RunningMeanStd((model.obs_dim,))
    ret_rms = ret_rms or RunningMeanStd(())
    for prefix, rms in (("obs_rms", obs_rms), ("ret_rms", ret_rms)):
        for key, value in rms_tensors(rms).items():
            out[f"{prefix}.{key}"] = value
    return out


def rms_tensors(rms: RunningMeanStd) -> dict[str, np.ndarray]:
    """A normaliser's statistics as the arrays a published version carries."""
    return {
        "mean": np.asarray(rms.mean, dtype=np.float64).reshape(-1),
        "var": np.asarray(rms.var, dtype=np.float64).reshape(-1),
        "count": np.asarray([rms.count], dtype=np.float64),
    }


def load_policy_tensors(
    model: ActorCritic, tensors: Mapping[str, np.ndarray]
) -> tuple[RunningMeanStd, RunningMeanStd]:
    """Copy parameters into ``model`` (names must match exactly); returns (obs_rms, ret_rms)."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    if missing:
        raise CorruptBlob(f"policy tensors lack parameters {missing}")
    with torch.no_grad():
        for name, p in params.items():
            value = np.asarray(tensors[name])
            if value.dtype.kind != "f":
                raise CorruptBlob(f"policy tensor {name!r} has dtype {value.dtype}, expected a "
                                  "float dtype")
            if tuple(value.shape) != tuple(p.shape):
                raise CorruptBlob(
                    f"policy tensor {name!r} has shape {value.shape}, module expects "
                    f"{tuple(p.shape)}"
                )
            p.copy_(torch.from_numpy(value.astype(np.float32)))
    out = []
    for prefix, shape in (("obs_rms", (model.obs_dim,)), ("ret_rms", ())):
        rms = RunningMeanStd(shape)
        if all(f"{prefix}.{k}" in tensors for k in _RMS_KEYS):
            rms.mean = np.array(tensors[f"{prefix}.mean"], dtype=np.float64).reshape(shape)
            rms.var = np.array(tensors[f"{prefix}.var"], dtype=np.float64).reshape(shape)
            rms.count = float(np.asarray(tensors[f"{prefix}.count"]).reshape(-1)[0])
        out.append(rms)
    return out[0], out[1]


def init_policy(
    env_id: str, spec: PolicySpec | None = None, seed: int = 0
) -> tuple[ActorCritic, dict[str, np.ndarray]]:
    """A freshly initialised policy for ``env_id`` and its version-0 tensors.

    Publish it with ``run_store.params.publish(0, tensors, policy_meta(model))``.
    """
    info = space_info(env_id)
    # A local generator so initialising a policy does not disturb the global RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ActorCritic(info.obs_dim, info.action_space, spec or PolicySpec(), env_id=env_id)
    return model, policy_tensors(model, None, None)


def normalize_obs(obs: np.ndarray, obs_rms: RunningMeanStd, spec: PolicySpec) -> np.ndarray:
    """The observation as the policy sees it (float32)."""
    if not spec.obs_norm:
        return np.asarray(obs, dtype=np.float32)
    return obs_rms.normalize(np.asarray(obs, dtype=np.float64), clip=spec.obs_clip)

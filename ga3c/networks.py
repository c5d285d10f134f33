"""Actor-critic networks. Each maps an observation batch to (policy logits, state value)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class InputScaledConv2d(nn.Conv2d):
    """A conv on uint8 pixels that acts as if they were scaled to [0, 1]: the 1/255 is folded into the
    (small) kernel instead of dividing every input element, which cost as much as the conv itself on CPU."""

    input_scale = 1.0 / 255.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, self.weight * self.input_scale, self.bias)


def orthogonal_init(model: nn.Module, value_scale: float = 1.0) -> None:
    """The A2C/PPO initialisation: orthogonal weights with ReLU gain, zero biases, a policy head of gain 0.01
    (a near-uniform first policy, so early gradients are not spent undoing a random preference) and a
    value head of gain 1 (1 / value_scale: the first values as at scale 1)."""
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(module.weight, nn.init.calculate_gain("relu"))
            nn.init.zeros_(module.bias)
    nn.init.orthogonal_(model.policy.weight, 0.01)
    nn.init.orthogonal_(model.value.weight, 1.0 / value_scale)


def conv_torso(obs_shape: Sequence[int], channels: Sequence[int], kernels: Sequence[int],
               strides: Sequence[int]) -> tuple[nn.Sequential, int]:
    """Conv layers with ReLUs on uint8 frames (the first scales them to [0, 1]), flattened; and its output size."""
    layers, in_ch = [], obs_shape[0]
    for out_ch, k, s in zip(channels, kernels, strides):
        layers += [(InputScaledConv2d if not layers else nn.Conv2d)(in_ch, out_ch, k, s), nn.ReLU()]
        in_ch = out_ch
    torso = nn.Sequential(*layers, nn.Flatten())
    with torch.no_grad():
        flat = torso(torch.zeros(1, *obs_shape)).shape[1]
    return torso, flat


class ConvActorCritic(nn.Module):
    """Conv torso on stacked uint8 frames (scaled to [0, 1] in the first conv), one hidden layer, two heads."""

    def __init__(self, obs_shape: Sequence[int], num_actions: int, channels: Sequence[int],
                 kernels: Sequence[int], strides: Sequence[int], hidden: int, init: str = "orthogonal",
                 value_scale: float = 1.0):
        super().__init__()
        self.value_scale = value_scale   # V = value_scale x the value head (MLPActorCritic says why)
        if init not in ("orthogonal", "torch"):
            raise ValueError(f"init must be 'orthogonal' or 'torch', got {init!r}")
        if len(obs_shape) != 3:
            raise ValueError(f"a conv net needs image observations (C, H, W), got shape {tuple(obs_shape)}; "
                             "use net=mlp for vector observations")
        self.torso, flat = conv_torso(obs_shape, channels, kernels, strides)
        self.hidden = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1)
        if init == "orthogonal":
            orthogonal_init(self, value_scale)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Measured on CPU (oneDNN, 1 thread): channels-last input trains ~10 % faster at batch 64, while
        # small inference batches run ~30 % faster in the default layout. Predictors run without grad.
        layout = torch.channels_last if torch.is_grad_enabled() else torch.contiguous_format
        x = obs.to(self.torso[0].weight.dtype, memory_format=layout)  # float32, or a bf16 copy's dtype
        x = self.hidden(self.torso(x))
        return self.policy(x), self.value_scale * self.value(x).squeeze(-1)


class MLPActorCritic(nn.Module):
    """Separate tanh MLPs for policy and value: the usual choice for classic control."""

    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden: Sequence[int], init: str = "orthogonal",
                 value_scale: float = 1.0):
        super().__init__()
        # V = value_scale x the value head's output: the head then works in units of the returns' scale, so an
        # optimizer step (of a set size, for Adam and RMSprop) moves V by value_scale x as much, and V can follow
        # returns of ~100 as fast as they change (docs/learning.md, learning that holds).
        self.value_scale = value_scale
        if init not in ("orthogonal", "torch"):
            raise ValueError(f"init must be 'orthogonal' or 'torch', got {init!r}")
        if len(obs_shape) != 1:
            raise ValueError(f"an MLP needs vector observations, got shape {tuple(obs_shape)}; "
                             "use net=small or net=large for images")

        def mlp(out: int, gain: float) -> nn.Sequential:
            layers, size = [], obs_shape[0]
            for h in hidden:
                layers += [nn.Linear(size, h), nn.Tanh()]
                size = h
            head = nn.Linear(size, out)
            if init == "orthogonal":
                nn.init.orthogonal_(head.weight, gain)
                nn.init.zeros_(head.bias)
            return nn.Sequential(*layers, head)

        self.policy = mlp(num_actions, 0.01)   # near-uniform initial policy
        self.value = mlp(1, 1.0 / value_scale)   # V starts as it would at scale 1

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obs = obs.float()
        return self.policy(obs), self.value_scale * self.value(obs).squeeze(-1)


class RecurrentActorCritic(nn.Module):
    """A torso (the conv net's, or a tanh MLP for vector observations) and an LSTM core, two heads: the
    recurrent policy. Acting advances each agent's (h, c) one step; learning unrolls the core over a rollout
    from the state its agent had when the rollout began. `starts` marks the steps that begin an episode: the
    state is zeroed before them, so a rollout may cross an episode's end.

    forward(obs, state, starts): obs (T, B, *obs_shape), state = (h, c) each (B, core), starts (T, B) bool
    -> logits (T, B, A), values (T, B), the state after the last step. step(): the same for T = 1.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int, core: int = 256,
                 channels: Sequence[int] = (16, 32), kernels: Sequence[int] = (8, 4), strides: Sequence[int] = (4, 2),
                 hidden: int = 256, init: str = "orthogonal", core_input_norm: bool = True, value_scale: float = 1.0):
        super().__init__()
        self.value_scale = value_scale   # V = value_scale x the value head (MLPActorCritic says why)
        if init not in ("orthogonal", "torch"):
            raise ValueError(f"init must be 'orthogonal' or 'torch', got {init!r}")
        if len(obs_shape) == 3:
            self.torso, flat = conv_torso(obs_shape, channels, kernels, strides)
            self.embed = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU())
        elif len(obs_shape) == 1:
            self.torso = nn.Identity()
            self.embed = nn.Sequential(nn.Linear(obs_shape[0], hidden), nn.Tanh())
        else:
            raise ValueError(f"a recurrent net needs image (C, H, W) or vector observations, got {tuple(obs_shape)}")
        self.obs_shape, self.core_size = tuple(obs_shape), core
        # LayerNorm of the torso's output keeps the gates' pre-activations in range: the ReLU embedding is
        # unbounded, and its growth can saturate every gate (docs/learning.md, the Pong memory study)
        self.core_input_norm = nn.LayerNorm(hidden) if core_input_norm else nn.Identity()
        self.core = nn.LSTMCell(hidden, core)
        self.policy = nn.Linear(core, num_actions)
        self.value = nn.Linear(core, 1)
        if init == "orthogonal":
            orthogonal_init(self, value_scale)
            for name, weight in self.core.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(weight)
                else:
                    nn.init.zeros_(weight)

    def initial_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, self.core_size, device=device)
        return zeros, zeros.clone()

    def forward(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], starts: torch.Tensor):
        steps, batch = obs.shape[:2]
        x = obs.reshape(steps * batch, *self.obs_shape).to(self.policy.weight.dtype)  # float32, or a bf16 copy's
        x = self.core_input_norm(self.embed(self.torso(x))).reshape(steps, batch, -1)   # once over every step
        h, c = state
        outputs = []
        for t in range(steps):
            keep = (~starts[t]).to(h.dtype).unsqueeze(-1)          # a new episode starts from a zero state
            h, c = self.core(x[t], (h * keep, c * keep))
            outputs.append(h)
        out = torch.stack(outputs)
        return self.policy(out), self.value_scale * self.value(out).squeeze(-1), (h, c)

    def step(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], starts: torch.Tensor):
        """One acting step for a batch of agents: obs (B, *obs_shape), starts (B,)."""
        logits, values, state = self(obs.unsqueeze(0), state, starts.unsqueeze(0))
        return logits[0], values[0], state


def build_network(net_cfg, obs_shape: Sequence[int], num_actions: int) -> nn.Module:
    """Instantiate the net/ config for a game; a net that does not fit the observations is a config error."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from ga3c.config import ConfigError

    try:
        model = instantiate(net_cfg, obs_shape=tuple(obs_shape), num_actions=num_actions)
    except InstantiationException as error:
        cause = error.__cause__ or error
        raise ConfigError(f"net: {cause}") from None
    return model

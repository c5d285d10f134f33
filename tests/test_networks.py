"""The networks: output shapes; the recurrent net's unroll against step-by-step acting."""
from __future__ import annotations


import pytest
import torch

from ga3c.networks import ConvActorCritic, MLPActorCritic, RecurrentActorCritic


def test_networks_shapes():
    conv = ConvActorCritic((4, 84, 84), 6, [16, 32], [8, 4], [4, 2], 256)
    logits, value = conv(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and value.shape == (3,)
    mlp = MLPActorCritic((4,), 2, [8])
    logits, value = mlp(torch.zeros(5, 4))
    assert logits.shape == (5, 2) and value.shape == (5,)
    with pytest.raises(ValueError, match="net=mlp"):
        ConvActorCritic((4,), 2, [16], [8], [4], 32)


@pytest.mark.parametrize("obs_shape", [(5,), (4, 36, 36)])
def test_the_recurrent_unroll_equals_step_by_step_acting_with_resets(obs_shape):
    """What the learner computes over a rollout (one unroll from the rollout's first state) must be what the
    agents were answered step by step (the state carried, zeroed where an episode starts)."""
    torch.manual_seed(0)
    net = RecurrentActorCritic(obs_shape, 3, core=16, channels=[4, 8], kernels=[8, 4], strides=[4, 2], hidden=32)
    steps, batch = 7, 3
    dtype = torch.uint8 if len(obs_shape) == 3 else torch.float32
    obs = (torch.randint(0, 255, (steps, batch, *obs_shape)) if len(obs_shape) == 3
           else torch.randn(steps, batch, *obs_shape)).to(dtype)
    starts = torch.zeros(steps, batch, dtype=torch.bool)
    starts[3, 0] = starts[5, 2] = True                       # episodes end inside the rollout
    first = tuple(torch.randn(batch, 16) for _ in range(2))   # the state the rollout began with
    with torch.no_grad():
        logits, values, last = net(obs, first, starts)
        state, step_logits, step_values = first, [], []
        for t in range(steps):
            lg, v, state = net.step(obs[t], state, starts[t])
            step_logits.append(lg)
            step_values.append(v)
    torch.testing.assert_close(logits, torch.stack(step_logits))
    torch.testing.assert_close(values, torch.stack(step_values))
    torch.testing.assert_close(last[0], state[0])
    # the state is carried: the same inputs from a zero state give other outputs until a reset ...
    with torch.no_grad():
        from_zero, _, _ = net(obs, net.initial_state(batch), starts)
    assert not torch.allclose(from_zero[:3, 0], logits[:3, 0])
    # ... and a reset makes them equal again: nothing before an episode's start reaches it
    torch.testing.assert_close(from_zero[3:, 0], logits[3:, 0])
    assert not torch.allclose(from_zero[:5, 2], logits[:5, 2])
    torch.testing.assert_close(from_zero[5:, 2], logits[5:, 2])


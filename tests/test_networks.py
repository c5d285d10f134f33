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


@pytest.mark.parametrize("core_input_norm", [False, True], ids=["plain", "core_input_norm"])
@pytest.mark.parametrize("obs_shape", [(5,), (4, 36, 36)])
def test_the_recurrent_unroll_equals_step_by_step_acting_with_resets(obs_shape, core_input_norm):
    """What the learner computes over a rollout (one unroll from the rollout's first state) must be what the
    agents were answered step by step (the state carried, zeroed where an episode starts)."""
    torch.manual_seed(0)
    net = RecurrentActorCritic(obs_shape, 3, core=16, channels=[4, 8], kernels=[8, 4], strides=[4, 2], hidden=32,
                               core_input_norm=core_input_norm)
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



def test_core_input_norm_bounds_what_the_core_sees():
    """With net.core_input_norm the core's input has mean 0 and variance 1 per step however large the torso's
    output grows (the saturation it is there against); without it, it grows with the torso's weights."""
    torch.manual_seed(0)
    shape = dict(core=8, channels=[4, 8], kernels=[8, 4], strides=[4, 2], hidden=32)   # images: a ReLU embedding
    plain = RecurrentActorCritic((4, 36, 36), 3, **shape, core_input_norm=False)
    normed = RecurrentActorCritic((4, 36, 36), 3, **shape, core_input_norm=True)
    normed.load_state_dict(plain.state_dict(), strict=False)
    for net in (plain, normed):
        with torch.no_grad():
            net.embed[0].weight.mul_(50.0)
    seen = {}
    for name, net in (("plain", plain), ("normed", normed)):
        net.core.register_forward_pre_hook(lambda module, args, name=name: seen.update({name: args[0]}))
        with torch.no_grad():
            frames = torch.randint(0, 255, (1, 64, 4, 36, 36), dtype=torch.uint8)
            net(frames, net.initial_state(64), torch.zeros(1, 64, dtype=torch.bool))
    assert seen["plain"].abs().mean() > 5
    torch.testing.assert_close(seen["normed"].mean(-1), torch.zeros(64), atol=1e-5, rtol=0)
    torch.testing.assert_close(seen["normed"].var(-1, unbiased=False), torch.ones(64), atol=1e-3, rtol=0)


def test_mlp_value_scale_multiplies_the_value_head_and_starts_where_scale_one_does():
    """net.value_scale: V is the head's output times the scale (a step on the head moves V that much more), and
    the head's smaller initial gain makes the first values the same as at scale 1."""
    obs = torch.randn(32, 4)
    torch.manual_seed(0)
    plain = MLPActorCritic((4,), 2, [16])
    torch.manual_seed(0)
    scaled = MLPActorCritic((4,), 2, [16], value_scale=100.0)
    assert torch.allclose(plain(obs)[1], scaled(obs)[1], atol=1e-5)
    assert torch.equal(plain(obs)[0], scaled(obs)[0])          # the policy is untouched
    with torch.no_grad():
        scaled.value[-1].bias.add_(0.5)
    assert torch.allclose(scaled(obs)[1] - plain(obs)[1], torch.full((32,), 50.0), atol=1e-3)

"""The learner: the actor-critic loss, PPO's clip, the learning-rate warm-up, RMSProp-TF, precision."""
from __future__ import annotations

import math


import numpy as np
import pytest
import torch

from ga3c.learner import AUTOCAST_DTYPES, Learner, RMSpropTF, a3c_loss, resolve_precision
from ga3c.networks import ConvActorCritic, MLPActorCritic


# --- loss and optimizer --------------------------------------------------------------------------------
def test_a3c_loss_matches_hand_computation():
    logits = torch.tensor([[0.0, 0.0], [np.log(3.0), 0.0]])   # pi = [.5,.5] and [.75,.25]
    values = torch.tensor([1.0, 2.0])
    actions = torch.tensor([0, 1])
    returns = torch.tensor([3.0, 0.5])
    eps, beta = 1e-6, 0.01
    out = a3c_loss(logits, values, actions, returns, beta=beta, log_epsilon=eps, value_coef=0.5, reduction="sum")
    adv = np.array([2.0, -1.5])
    logp = np.log(np.array([0.5, 0.25]) + eps)
    policy = -(logp * adv).sum()
    p = np.array([[0.5, 0.5], [0.75, 0.25]])
    entropy = -(p * np.log(p + eps)).sum()
    value = ((np.array([3.0, 0.5]) - np.array([1.0, 2.0])) ** 2).sum()
    assert out["policy_loss"].item() == pytest.approx(policy, rel=1e-5)
    assert out["entropy"].item() == pytest.approx(entropy, rel=1e-5)
    assert out["value_loss"].item() == pytest.approx(value, rel=1e-5)
    assert out["loss"].item() == pytest.approx(policy - beta * entropy + 0.5 * value, rel=1e-5)
    mean = a3c_loss(logits, values, actions, returns, beta=beta, log_epsilon=eps, value_coef=0.5, reduction="mean")
    assert mean["loss"].item() == pytest.approx(out["loss"].item() / 2, rel=1e-5)


def test_ppo_clip_stops_the_gradient_of_samples_outside_the_band():
    """learner.ppo_clip: -min(r A, clip(r) A) with r = pi / mu. Sample 0 (A > 0, r = 1.5 > 1.2) is clipped:
    no gradient; sample 1 (A < 0, r = 1) gets the plain policy gradient."""
    logits = torch.tensor([[0.0, 0.0], [np.log(3.0), 0.0]], requires_grad=True)   # pi = [.5,.5], [.75,.25]
    actions, returns, values = torch.tensor([0, 1]), torch.tensor([3.0, 0.5]), torch.tensor([1.0, 2.0])
    behaviour_logp = torch.log(torch.tensor([0.5 / 1.5, 0.25]))
    out = a3c_loss(logits, values, actions, returns, 0.0, 1e-6, 0.0, "sum", behaviour_logp=behaviour_logp,
                   ppo_clip=0.2)
    assert out["policy_loss"].item() == pytest.approx(-(1.2 * 2.0 + 1.0 * -1.5), rel=1e-5)
    assert out["ppo_clipped_share"].item() == 0.5
    out["loss"].backward()
    assert logits.grad[0].abs().sum() == 0
    plain = torch.tensor([[np.log(3.0), 0.0]], requires_grad=True)
    a3c_loss(plain, values[1:], actions[1:], returns[1:], 0.0, 0.0, 0.0, "sum")["loss"].backward()
    np.testing.assert_allclose(logits.grad[1].numpy(), plain.grad[0].numpy(), rtol=1e-5)


def test_advantage_does_not_train_the_value_through_the_policy_term():
    values = torch.tensor([1.0], requires_grad=True)
    out = a3c_loss(torch.zeros(1, 2), values, torch.tensor([0]), torch.tensor([3.0]), 0.0, 1e-6, 0.0, "sum")
    out["loss"].backward()
    assert values.grad is None or values.grad.abs().sum() == 0


def test_the_learner_replaces_its_published_metrics_never_changes_them():
    """The monitor (watchdog thread) iterates learner.last_metrics while the learner steps on: a dict once
    published must not change size (adding grad_norm to it crashed the watchdog once, and the run hung)."""
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda params: torch.optim.Adam(params, lr=1e-3))
    logits, values = learner.model(torch.zeros(3, 4))
    (logits.sum() + values.sum()).backward()
    published = {"loss": torch.tensor(1.0), "grad_norm": torch.tensor(0.5)}
    learner.last_metrics = published
    learner._step_metrics = {"loss": torch.tensor(2.0)}
    learner.on_before_optimizer_step(None)
    assert published == {"loss": torch.tensor(1.0), "grad_norm": torch.tensor(0.5)}
    assert set(learner.last_metrics) == {"loss", "grad_norm"} and learner.last_metrics["grad_norm"] > 0
    assert learner.last_metrics["loss"] == 2.0


def applied_learning_rates(learner: Learner, updates: int = 6) -> list[float]:
    """The learning rate Lightning's optimizer step uses at each of `updates` updates of `learner`."""
    import pytorch_lightning as pl

    n = 6
    batch = dict(obs=torch.randn(n, 4), actions=torch.randint(0, 2, (n,)), returns=torch.randn(n),
                 versions=torch.zeros(n, dtype=torch.long))
    seen = []

    class Record(pl.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            seen.append(optimizer.param_groups[0]["lr"])

    trainer = pl.Trainer(max_steps=updates, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Record()], accelerator="cpu")
    trainer.fit(learner, torch.utils.data.DataLoader([batch] * updates, batch_size=None))
    return seen


def test_learning_rate_warms_up_linearly_per_update_then_holds():
    """learner.warmup_updates: Lightning steps the schedule every update (not every epoch), lr/N at the first
    update up to lr at the N-th, then lr."""
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda p: torch.optim.RMSprop(p, lr=1e-3), reduction="mean",
                      warmup_updates=4)
    assert applied_learning_rates(learner) == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert Learner(MLPActorCritic((4,), 2, [8]), lambda p: torch.optim.RMSprop(p, lr=1e-3)).configure_optimizers() \
        .__class__ is torch.optim.RMSprop   # 0 = no schedule at all


def test_learning_rate_decays_linearly_after_the_warm_up_and_holds_at_the_final_scale():
    """learner.lr_decay_updates / lr_final_scale: the factor falls linearly from 1 (times the warm-up's) to the
    final scale at lr_decay_updates, stays there, and is what Lightning applies at each update."""
    model = MLPActorCritic((4,), 2, [8])
    learner = Learner(model, lambda p: torch.optim.RMSprop(p, lr=1e-3), warmup_updates=2, lr_decay_updates=4,
                      lr_final_scale=0.2)
    assert [learner.lr_scale(u) for u in range(6)] == pytest.approx([0.5, 0.8, 0.6, 0.4, 0.2, 0.2])
    no_warmup = Learner(model, lambda p: torch.optim.RMSprop(p, lr=1e-3), lr_decay_updates=4)
    assert [no_warmup.lr_scale(u) for u in range(6)] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
    assert applied_learning_rates(learner) == pytest.approx([5e-4, 8e-4, 6e-4, 4e-4, 2e-4, 2e-4])


def test_entropy_weight_moves_linearly_to_its_final_value_and_the_loss_uses_it_at_each_update():
    """learner.beta_decay_updates / beta_final: beta at update 0, beta_final from beta_decay_updates on, linear
    between (after beta_decay_start updates at beta when it is set); each update's loss is
    policy - beta(update) x entropy + value_coef x value, with beta published."""
    import pytorch_lightning as pl

    model = MLPActorCritic((4,), 2, [8])
    learner = Learner(model, lambda p: torch.optim.RMSprop(p, lr=1e-3), beta=0.01, beta_decay_updates=4,
                      beta_final=0.002, reduction="mean")
    assert [learner.beta_at(u) for u in range(6)] == pytest.approx([0.01, 0.008, 0.006, 0.004, 0.002, 0.002])
    assert Learner(model, lambda p: None, beta=0.01).beta_at(10 ** 6) == 0.01   # 0 = off: beta throughout
    late = Learner(model, lambda p: None, beta=0.01, beta_decay_updates=4, beta_final=0.002, beta_decay_start=3)
    assert [late.beta_at(u) for u in range(9)] == pytest.approx([0.01] * 4 + [0.008, 0.006, 0.004, 0.002, 0.002])
    n = 6
    batch = dict(obs=torch.randn(n, 4), actions=torch.randint(0, 2, (n,)), returns=torch.randn(n),
                 versions=torch.zeros(n, dtype=torch.long))
    published = []

    class Record(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            published.append({k: float(v) for k, v in module.last_metrics.items()})

    trainer = pl.Trainer(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Record()], accelerator="cpu")
    trainer.fit(learner, torch.utils.data.DataLoader([batch] * 6, batch_size=None))
    assert [m["beta"] for m in published] == pytest.approx([0.01, 0.008, 0.006, 0.004, 0.002, 0.002])
    for m in published:
        assert m["loss"] == pytest.approx(m["policy_loss"] - m["beta"] * m["entropy"] + 0.5 * m["value_loss"],
                                          rel=1e-5)


def test_entropy_floor_raises_beta_while_the_policy_is_under_it_and_lets_it_fall_back_above():
    """learner.entropy_floor: beta's factor grows each update the batch's mean entropy is under the floor (a
    share of log(actions)), never exceeds 1000x, falls back to 1 (never below) once the entropy is above it, and
    is what the next update's loss uses; it is part of the checkpointed state. 0 = off."""
    model = MLPActorCritic((4,), 2, [8])
    learner = Learner(model, lambda p: None, beta=0.01, entropy_floor=0.5, reduction="sum")
    floor = 0.5 * math.log(2)
    learner.raise_beta_under_floor(torch.tensor(floor / 2), 2)          # half the floor: log factor + 0.05
    assert float(learner.log_beta_boost) == pytest.approx(0.05)
    for _ in range(10_000):
        learner.raise_beta_under_floor(torch.tensor(0.0), 2)            # deterministic: as far as allowed
    assert float(learner.log_beta_boost.exp()) == pytest.approx(1000.0)
    for _ in range(10_000):
        learner.raise_beta_under_floor(torch.tensor(math.log(2)), 2)    # uniform again: back to beta
    assert float(learner.log_beta_boost) == 0.0
    assert "log_beta_boost" in learner.state_dict()

    # in the update: a near-deterministic policy (entropy ~0, summed over the batch) raises the next update's beta
    saturated = MLPActorCritic((4,), 2, [8])
    with torch.no_grad():
        saturated.policy[-1].bias.copy_(torch.tensor([30.0, -30.0]))
    learner = Learner(saturated, lambda p: None, beta=0.01, entropy_floor=0.5, reduction="sum")
    n = 8
    batch = dict(obs=torch.randn(n, 4), actions=torch.zeros(n, dtype=torch.long), returns=torch.randn(n),
                 versions=torch.zeros(n, dtype=torch.long))
    learner.training_step(batch, 0)
    assert float(learner._step_metrics["beta"]) == pytest.approx(0.01)
    learner.training_step(batch, 1)
    assert float(learner._step_metrics["beta"]) == pytest.approx(0.01 * math.exp(0.1), rel=1e-3)
    off = Learner(saturated, lambda p: None, beta=0.01)
    off.training_step(batch, 0), off.training_step(batch, 1)
    assert off._step_metrics["beta"] == 0.01 and float(off.log_beta_boost) == 0.0


def test_rmsprop_tf_matches_tensorflow_formula():
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = RMSpropTF([p], lr=0.1, alpha=0.9, eps=0.1)
    p.grad = torch.tensor([2.0])
    opt.step()
    ms = 0.9 * 1.0 + 0.1 * 4.0           # accumulator starts at 1
    assert p.item() == pytest.approx(1.0 - 0.1 * 2.0 / np.sqrt(ms + 0.1))


def test_precision_auto_picks_bf16_only_for_conv_nets_on_native_bf16_hardware():
    conv = ConvActorCritic((4, 84, 84), 3, [16, 32], [8, 4], [4, 2], 64)
    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert resolve_precision("auto", conv, "cpu") == ("bf16-mixed" if native else "32-true")
    assert resolve_precision("auto", MLPActorCritic((4,), 2, [16]), "cpu") == "32-true"
    assert resolve_precision("32-true", conv, "cpu") == "32-true"
    assert AUTOCAST_DTYPES.get("bf16-mixed") == torch.bfloat16 and AUTOCAST_DTYPES.get("32-true") is None


def test_bf16_mixed_a3c_gradients_agree_with_fp32():
    torch.manual_seed(0)
    model = ConvActorCritic((4, 84, 84), 6, [16, 32], [8, 4], [4, 2], 256)
    obs = torch.randint(0, 255, (64, 4, 84, 84), dtype=torch.uint8)
    actions, returns = torch.randint(0, 6, (64,)), torch.randn(64)

    def gradient(autocast: bool) -> torch.Tensor:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits, values = model(obs)
            loss = a3c_loss(logits, values, actions, returns, 0.01, 1e-6, 0.5, "sum")["loss"]
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    full, mixed = gradient(False), gradient(True)
    assert torch.nn.functional.cosine_similarity(full, mixed, dim=0) > 0.99


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_tf_steps_follow_the_tensorflow_formula(momentum):
    """Two steps on two parameters against the formula written out: ms = alpha ms + (1 - alpha) g^2 from ms = 1,
    step = lr g / sqrt(ms + eps), through a momentum buffer when momentum > 0."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))]
    want = [p.detach().clone() for p in params]
    square, buffer = [torch.ones_like(p) for p in params], [torch.zeros_like(p) for p in params]
    optimizer = RMSpropTF(params, lr=0.05, alpha=0.9, eps=0.1, momentum=momentum)
    for _ in range(2):
        grads = [torch.randn_like(p) for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
        for i, g in enumerate(grads):
            square[i] = 0.9 * square[i] + 0.1 * g * g
            step = 0.05 * g / torch.sqrt(square[i] + 0.1)
            buffer[i] = momentum * buffer[i] + step
            want[i] = want[i] - (buffer[i] if momentum else step)
    for p, w in zip(params, want):
        torch.testing.assert_close(p.detach(), w)


def test_non_finite_loss_is_recorded_on_the_device_and_raised_at_the_check():
    """The update never reads the loss back: the first non-finite loss or gradient norm is recorded (update,
    kind, value) and raised by raise_if_nonfinite, which the monitor calls once a window and every checkpoint
    calls first; later non-finite values do not overwrite the first."""
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda params: torch.optim.SGD(params, lr=0.1))
    learner.raise_if_nonfinite()   # nothing recorded: no error
    learner.version = 2
    learner.note_if_nonfinite(torch.tensor(1.5), torch.tensor(3.0))
    learner.raise_if_nonfinite()
    learner.version = 3
    learner.note_if_nonfinite(torch.tensor(float("nan")), torch.tensor(float("nan")))
    learner.version = 4
    learner.note_if_nonfinite(torch.tensor(1.0), torch.tensor(float("inf")))
    with pytest.raises(FloatingPointError, match=r"^loss is nan at update 3: training stopped"):
        learner.raise_if_nonfinite()
    with pytest.raises(FloatingPointError, match="loss is nan at update 3"):
        learner.on_save_checkpoint({})
    fresh = Learner(MLPActorCritic((4,), 2, [8]), lambda params: torch.optim.SGD(params, lr=0.1))
    fresh.version = 7
    fresh.note_if_nonfinite(torch.tensor(0.5), torch.tensor(float("-inf")))
    with pytest.raises(FloatingPointError, match="^gradient norm is -inf at update 7"):
        fresh.raise_if_nonfinite()
    assert "first_nonfinite" not in fresh.state_dict()   # not in checkpoints: a resumed run starts clean

"""V-trace targets and advantages against a plain, loop-by-loop reference of the IMPALA paper's definition."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ga3c.agent import discounted_returns
from ga3c.learner import Learner, vtrace_targets
from ga3c.networks import MLPActorCritic


def reference_vtrace(rollouts, rho_bar, c_bar, lam):
    """Espeholt et al. (2018) eq. 1 written as sums, one rollout at a time:
    vs_s = V_s + sum_{t=s}^{n-1} (prod_{i=s}^{t-1} gamma_i c_i) rho_t (r_t + gamma_t V_{t+1} - V_t), vs_n = V_n;
    advantage_s = rho_s (r_s + gamma_s vs_{s+1} - V_s)."""
    all_vs, all_adv = [], []
    for r in rollouts:
        n = len(r["rewards"])
        values = list(r["values"]) + [r["bootstrap"]]
        ratio = np.exp(np.array(r["target_logp"]) - np.array(r["behaviour_logp"]))
        rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
        vs = []
        for s in range(n):
            total, weight = values[s], 1.0
            for t in range(s, n):
                total += weight * rho[t] * (r["rewards"][t] + r["discounts"][t] * values[t + 1] - values[t])
                weight *= r["discounts"][t] * c[t]
            vs.append(total)
        vs_next = vs[1:] + [values[n]]
        all_vs += vs
        all_adv += [rho[s] * (r["rewards"][s] + r["discounts"][s] * vs_next[s] - values[s]) for s in range(n)]
    return np.array(all_vs), np.array(all_adv)


def random_rollouts(rng, lengths, gamma=0.99, terminal_at=()):
    rollouts = []
    for i, n in enumerate(lengths):
        discounts = np.full(n, gamma)
        if i in terminal_at:  # the episode ended with this rollout's last step
            discounts[-1] = 0.0
        rollouts.append(dict(rewards=rng.normal(size=n), discounts=discounts, values=rng.normal(size=n),
                             bootstrap=float(rng.normal()), behaviour_logp=np.log(rng.uniform(0.05, 1, n)),
                             target_logp=np.log(rng.uniform(0.05, 1, n))))
    return rollouts


def flat_batch(rollouts):
    """The layout trainer threads build: samples flat, each tagged with its rollout and step."""
    cat = lambda key: torch.tensor(np.concatenate([r[key] for r in rollouts]), dtype=torch.float32)  # noqa: E731
    return dict(behaviour_logp=cat("behaviour_logp"), target_logp=cat("target_logp"), rewards=cat("rewards"),
                discounts=cat("discounts"), values=cat("values"),
                bootstrap=torch.tensor([r["bootstrap"] for r in rollouts], dtype=torch.float32),
                rollout=torch.tensor(np.concatenate([np.full(len(r["rewards"]), i) for i, r in enumerate(rollouts)])),
                step=torch.tensor(np.concatenate([np.arange(len(r["rewards"])) for r in rollouts])),
                lengths=torch.tensor([len(r["rewards"]) for r in rollouts]))


@pytest.mark.parametrize("rho_bar, c_bar, lam", [(1.0, 1.0, 1.0), (2.0, 0.5, 1.0), (1.0, 1.0, 0.9), (0.5, 0.5, 0.95)])
def test_vtrace_matches_reference_on_ragged_rollouts_with_episode_ends(rho_bar, c_bar, lam):
    rng = np.random.default_rng(0)
    # ragged: full rollouts, short ones (an episode ended or was truncated mid-rollout), a single step
    rollouts = random_rollouts(rng, [5, 3, 5, 1, 2], terminal_at={1, 3})
    vs, advantages, rho = vtrace_targets(**flat_batch(rollouts), rho_bar=rho_bar, c_bar=c_bar, lam=lam)
    want_vs, want_adv = reference_vtrace(rollouts, rho_bar, c_bar, lam)
    np.testing.assert_allclose(vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages.numpy(), want_adv, rtol=1e-5, atol=1e-5)
    assert float(rho.max()) <= rho_bar + 1e-6


@pytest.mark.parametrize("horizon", [5, 8, 20])
def test_vtrace_with_a_static_horizon_matches_reference(horizon):
    """The learner passes t_max as the horizon (no read-back of lengths.max()): a horizon past the longest
    rollout pads, and changes nothing."""
    rng = np.random.default_rng(horizon)
    lengths = [5, 3, 5, 1, 2] if horizon < 20 else [20, 7, 1, 20, 13]
    rollouts = random_rollouts(rng, lengths, terminal_at={1, 3})
    vs, advantages, _ = vtrace_targets(**flat_batch(rollouts), rho_bar=1.0, c_bar=0.9, lam=0.95, horizon=horizon)
    want_vs, want_adv = reference_vtrace(rollouts, 1.0, 0.9, 0.95)
    np.testing.assert_allclose(vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages.numpy(), want_adv, rtol=1e-5, atol=1e-5)


def test_vtrace_on_policy_equals_the_agents_returns():
    """With pi = mu, the V-trace targets are the n-step (lam = 1) and lambda-returns the agents compute; a
    terminal step (discount 0) bootstraps nothing, a truncated one (discount gamma) bootstraps V(x_n)."""
    rng = np.random.default_rng(1)
    for lam in (1.0, 0.95):
        rollouts = random_rollouts(rng, [5, 4, 2], terminal_at={1})
        for r in rollouts:
            r["target_logp"] = r["behaviour_logp"]
        vs, advantages, _ = vtrace_targets(**flat_batch(rollouts), lam=lam)
        want = np.concatenate([discounted_returns(r["rewards"].astype(np.float32),
                                                  0.0 if r["discounts"][-1] == 0 else r["bootstrap"], 0.99,
                                                  r["values"].astype(np.float32), lam) for r in rollouts])
        np.testing.assert_allclose(vs.numpy(), want, rtol=1e-5, atol=1e-5)
        if lam == 1.0:  # then the policy advantage is the n-step return minus V
            np.testing.assert_allclose(advantages.numpy(), want - flat_batch(rollouts)["values"].numpy(),
                                       rtol=1e-5, atol=1e-5)


def test_vtrace_cuts_traces_of_off_policy_actions():
    """An action the learner's policy would no longer take (pi/mu ~ 0) stops everything after it from
    reaching the earlier targets: vs_0 then only sees r_0 + gamma V_1."""
    rollout = dict(rewards=np.array([1.0, 0.0, 10.0]), discounts=np.full(3, 0.9), values=np.array([0.5, 0.2, 0.1]),
                   bootstrap=3.0, behaviour_logp=np.log([0.5, 0.5, 0.5]), target_logp=np.log([0.5, 1e-9, 0.5]))
    vs, _, _ = vtrace_targets(**flat_batch([rollout]))
    assert vs[0].item() == pytest.approx(1.0 + 0.9 * 0.2, abs=1e-5)


def test_vtrace_advantages_without_rho_for_ppo():
    """With PPO's surrogate the ratio multiplies the advantage there, so V-trace must not apply rho_t as well."""
    rollouts = random_rollouts(np.random.default_rng(1), [5, 2, 4], terminal_at={1})
    _, weighted, rho = vtrace_targets(**flat_batch(rollouts))
    _, plain, _ = vtrace_targets(**flat_batch(rollouts), rho_in_advantages=False)
    np.testing.assert_allclose(weighted.numpy(), (rho * plain).numpy(), rtol=1e-5, atol=1e-6)


def test_learner_trains_with_vtrace_batches():
    """One Learner step on a batch in the trainer's layout: finite loss, importance weights reported."""
    model = MLPActorCritic((4,), 2, [8])
    learner = Learner(model, lambda p: torch.optim.Adam(p, lr=1e-3), correction="vtrace", reduction="mean")
    n = 7
    batch = dict(obs=torch.randn(n, 4), actions=torch.randint(0, 2, (n,)), returns=torch.zeros(n),
                 versions=torch.zeros(n, dtype=torch.long), rewards=torch.randn(n), discounts=torch.full((n,), 0.99),
                 behaviour_logp=torch.full((n,), float(np.log(0.5))), rollout=torch.tensor([0, 0, 0, 0, 1, 1, 1]),
                 step=torch.tensor([0, 1, 2, 3, 0, 1, 2]), bootstrap=torch.tensor([0.3, -0.2]),
                 lengths=torch.tensor([4, 3]))
    loss = learner.training_step(batch, 0)
    assert torch.isfinite(loss)
    assert learner.last_metrics == {}   # a step's metrics are published whole, with its gradient norm
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    learner.on_before_optimizer_step(None)
    assert 0 < learner.last_metrics["vtrace_rho_mean"] <= 1.0 and learner.last_metrics["grad_norm"] > 0


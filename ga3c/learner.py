"""The learner: a LightningModule holding the one actor-critic (predictors use the same object)."""
from __future__ import annotations

import math
import time
from typing import Callable

import pytorch_lightning as pl
import torch
from torch import nn


class RMSpropTF(torch.optim.Optimizer):
    """RMSProp as TensorFlow 1 had it, and so the paper: the squared-gradient average starts at 1 and
    epsilon sits inside the square root (torch.optim.RMSprop starts at 0 with epsilon outside, which with
    the paper's eps=0.1 is a very different step size)."""

    def __init__(self, params, lr: float = 3e-4, alpha: float = 0.99, eps: float = 0.1, momentum: float = 0.0):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, momentum=momentum))

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads, states = [p.grad for p in params], [self.state[p] for p in params]
            for p, state in zip(params, states):
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                    if group["momentum"]:
                        state["momentum_buffer"] = torch.zeros_like(p)
            # foreach: one call per operation for all parameters, not one per parameter (the update's overhead)
            square_avgs = [state["square_avg"] for state in states]
            torch._foreach_mul_(square_avgs, group["alpha"])
            torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - group["alpha"])
            denoms = torch._foreach_add(square_avgs, group["eps"])
            torch._foreach_sqrt_(denoms)
            if group["momentum"]:
                buffers = [state["momentum_buffer"] for state in states]
                torch._foreach_mul_(buffers, group["momentum"])
                torch._foreach_addcdiv_(buffers, grads, denoms, value=group["lr"])
                torch._foreach_sub_(params, buffers)
            else:
                torch._foreach_addcdiv_(params, grads, denoms, value=-group["lr"])
        return loss


def a3c_loss(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
             beta: float, log_epsilon: float, value_coef: float, reduction: str,
             advantages: torch.Tensor | None = None, normalize_advantage: bool = False,
             behaviour_logp: torch.Tensor | None = None, ppo_clip: float = 0.0) -> dict[str, torch.Tensor]:
    """Policy gradient with the advantage R - V(s) (V not differentiated there), entropy bonus beta * H(pi),
    squared value error. log(pi + epsilon) keeps a stale policy's near-zero probabilities finite.
    `advantages` replaces R - V(s) where a correction computed its own (V-trace's rho_t (r + gamma v_{t+1} - V));
    `normalize_advantage` scales them to zero mean, unit deviation over the batch (PPO's habit).
    `ppo_clip` > 0: PPO's clipped surrogate -min(r A, clip(r, 1 - c, 1 + c) A), r = pi(a|s) / mu(a|s) against the
    acting policy's `behaviour_logp`; once a sample's ratio leaves the band its gradient stops, which is what
    makes several passes over one batch (learner.epochs) safe."""
    probs = torch.softmax(logits.float(), dim=-1)
    log_probs = torch.log(probs + log_epsilon)
    chosen_log_prob = log_probs.gather(1, actions.long().unsqueeze(1)).squeeze(1)
    values = values.float()
    advantage = returns - values.detach() if advantages is None else advantages
    if normalize_advantage and len(advantage) > 1:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    extra = {}
    if ppo_clip > 0:
        ratio = torch.exp(torch.log_softmax(logits.float(), -1).gather(1, actions.long().unsqueeze(1)).squeeze(1)
                          - behaviour_logp.float())
        policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - ppo_clip, 1 + ppo_clip) * advantage)
        extra = dict(ppo_clipped_share=((ratio - 1).abs() > ppo_clip).float().mean().detach())
    else:
        policy_loss = -chosen_log_prob * advantage
    entropy = -(probs * log_probs).sum(dim=1)
    value_loss = (returns - values) ** 2
    reduce = torch.sum if reduction == "sum" else torch.mean
    policy_loss, entropy, value_loss = reduce(policy_loss), reduce(entropy), reduce(value_loss)
    loss = policy_loss - beta * entropy + value_coef * value_loss
    return dict(loss=loss, policy_loss=policy_loss, entropy=entropy, value_loss=value_loss) | extra


@torch.no_grad()
def vtrace_targets(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, rewards: torch.Tensor,
                   discounts: torch.Tensor, values: torch.Tensor, bootstrap: torch.Tensor, rollout: torch.Tensor,
                   step: torch.Tensor, lengths: torch.Tensor, rho_bar: float = 1.0, c_bar: float = 1.0,
                   lam: float = 1.0, rho_in_advantages: bool = True,
                   horizon: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-trace (Espeholt et al. 2018, eq. 1) for a batch of rollouts laid out flat, sample i being step
    `step[i]` of rollout `rollout[i]`; rollout r has `lengths[r]` steps and `bootstrap[r]` = V(x_n) after them.
    discounts[i] is gamma, or 0 where the step ended the episode.

        vs_t - V(x_t) = delta_t + gamma_t c_t (vs_{t+1} - V(x_{t+1})),  delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))
        policy advantage_t = rho_t (r_t + gamma_t vs_{t+1} - V(x_t)),   vs_n = V(x_n)

    with rho_t = min(rho_bar, pi/mu) and c_t = lam * min(c_bar, pi/mu). Returns (vs, advantages, rho) flat.
    `rho_in_advantages=False` leaves rho_t out of the policy advantage (PPO's surrogate applies its own ratio).
    `horizon`: the longest a rollout can be (t_max); given, every shape is known without reading the batch,
    so nothing here waits on the device (without it, lengths.max() is read back).
    Hand-written: no library we depend on has it, and the rollouts here come ragged (episode ends)."""
    num_rollouts = len(lengths)
    if horizon is None:
        horizon = int(lengths.max()) if num_rollouts else 0
    ratio = torch.exp(target_logp.float() - behaviour_logp.float())
    rho, c = ratio.clamp(max=rho_bar), lam * ratio.clamp(max=c_bar)

    def padded(flat: torch.Tensor, width: int = horizon) -> torch.Tensor:
        out = torch.zeros(num_rollouts, width, dtype=torch.float32, device=flat.device)
        out[rollout, step] = flat.float()
        return out

    # values_ext[r, t] = V(x_t) for t < n_r and V(x_n) at t = n_r: the "next value" of every step is one right.
    values_ext = padded(values, horizon + 1)
    values_ext[torch.arange(num_rollouts, device=lengths.device), lengths] = bootstrap.float()
    mask = padded(torch.ones_like(rewards))
    rho_p, rewards_p, discounts_p = padded(rho), padded(rewards), padded(discounts)
    deltas = mask * rho_p * (rewards_p + discounts_p * values_ext[:, 1:] - values_ext[:, :-1])
    # The backward recursion corrections_t = delta_t + a_t corrections_{t+1} (a_t = gamma_t c_t; 0 past the
    # end) in closed form: corrections_t = sum_{k >= t} (a_t ... a_{k-1}) delta_k, the products from a cumprod
    # over a (horizon x horizon) triangle: a few operations whatever the horizon, instead of a loop over it.
    decay = mask * discounts_p * padded(c)
    ones = torch.ones(num_rollouts, horizon, horizon, device=values.device)
    upper = torch.ones(horizon, horizon, dtype=torch.bool, device=values.device).triu()
    running = torch.where(upper, decay.unsqueeze(1), ones).cumprod(-1)   # [r, t, k] = a_t ... a_k for k >= t
    weights = torch.cat((ones[:, :, :1], running[:, :, :-1]), -1) * upper   # [r, t, k] = a_t ... a_{k-1}
    corrections = torch.cat((torch.einsum("rtk,rk->rt", weights, deltas),
                             deltas.new_zeros(num_rollouts, 1)), 1)   # vs - V, 0 at t = n
    vs_ext = values_ext + corrections
    advantages = (rho_p if rho_in_advantages else mask) * (rewards_p + discounts_p * vs_ext[:, 1:] - values_ext[:, :-1])
    return vs_ext[rollout, step], advantages[rollout, step], rho


CORRECTIONS = ("none", "vtrace")


AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16, "16-mixed": torch.float16, "16": torch.float16}


def resolve_precision(precision, model: nn.Module, accelerator: str = "auto") -> str:
    """trainer.precision as Lightning takes it. `auto` is bf16-mixed for conv nets where bf16 is native
    (batched conv passes gain 1.2-1.7x on an AVX512-BF16 CPU), else 32-true (MLPs lose in bf16)."""
    if str(precision) != "auto":
        return str(precision)
    has_conv = any(isinstance(m, nn.Conv2d) for m in model.modules())
    use_cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if use_cuda:
        native_bf16 = torch.cuda.is_bf16_supported()
    else:
        native_bf16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return "bf16-mixed" if has_conv and native_bf16 else "32-true"


def linear_decay(start: float, end: float, update: int, updates: int) -> float:
    """start moved linearly to end over `updates` updates, then held at end (the learner's schedules)."""
    return start + (end - start) * min(1.0, update / updates)


def lr_scale_at(update: float, warmup_updates: int = 0, lr_decay_updates: int = 0,
                lr_final_scale: float = 0.0) -> float:
    """The learning rate's factor at `update` (counted from 0): a linear warm-up over warmup_updates, times a
    linear decay from 1 to lr_final_scale over lr_decay_updates (then held there). GA3C's learner and A3C's
    workers both follow it."""
    scale = min(1.0, (update + 1) / warmup_updates) if warmup_updates else 1.0
    if lr_decay_updates:
        scale *= linear_decay(1.0, lr_final_scale, update, lr_decay_updates)
    return scale


def beta_at(update: float, beta: float, beta_decay_updates: int = 0, beta_final: float = 0.001,
            beta_decay_start: int = 0) -> float:
    """The entropy weight at `update` (counted from 0): beta until beta_decay_start, then moved linearly to
    beta_final over beta_decay_updates (then held there); beta throughout when beta_decay_updates is 0."""
    if not beta_decay_updates:
        return beta
    return linear_decay(beta, beta_final, max(0, update - beta_decay_start), beta_decay_updates)


class Learner(pl.LightningModule):
    """A3C loss, one optimizer step per pass over an assembled batch (`epochs` passes; the dataset repeats it).
    `version` (updates done) tags each prediction so the policy lag of every trained sample is known."""

    @classmethod
    def from_config(cls, model: nn.Module, learner_cfg, counters=None) -> "Learner":
        """The learner a config's `learner:` section describes (conf/config.yaml): `optimizer` is built by Hydra,
        every other key is a keyword of __init__ of the same name (ga3c/schema.py's Learner admits no other)."""
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        keys = {k: v for k, v in OmegaConf.to_container(learner_cfg, resolve=True).items() if k != "optimizer"}
        return cls(model, instantiate(learner_cfg.optimizer), counters=counters, **keys)

    def __init__(self, model: nn.Module, optimizer: Callable, gamma: float = 0.99, beta: float = 0.01,
                 log_epsilon: float = 1e-6, value_coef: float = 0.5, reduction: str = "sum",
                 grad_clip: float = 0.0, reward_clip: float = 1.0, counters=None, correction: str = "none",
                 rho_bar: float = 1.0, c_bar: float = 1.0, gae_lambda: float = 1.0,
                 normalize_advantage: bool = False, warmup_updates: int = 0, lr_decay_updates: int = 0,
                 lr_final_scale: float = 0.0, epochs: int = 1, ppo_clip: float = 0.0,
                 beta_decay_updates: int = 0, beta_final: float = 0.001, beta_decay_start: int = 0,
                 entropy_floor: float = 0.0):
        super().__init__()
        self.entropy_floor = entropy_floor
        # The entropy floor's state: log of the factor on beta (0 = beta as scheduled). A buffer, so checkpoints
        # keep it, and a device tensor, so its update never waits on the host.
        self.register_buffer("log_beta_boost", torch.zeros(()))
        # The first non-finite loss or gradient norm: (update, 0 = loss / 1 = gradient norm, its value), update
        # -1 while there is none. Kept on the device and read once per monitor window and before every
        # checkpoint (raise_if_nonfinite): a check per update would make the host wait for every update.
        self.register_buffer("first_nonfinite", torch.tensor([-1.0, 0.0, 0.0], dtype=torch.float64),
                             persistent=False)
        self.beta_decay_updates, self.beta_final = beta_decay_updates, beta_final
        self.beta_decay_start = beta_decay_start
        self.epochs, self.ppo_clip = epochs, ppo_clip
        self.warmup_updates = warmup_updates
        self.lr_decay_updates, self.lr_final_scale = lr_decay_updates, lr_final_scale
        self.correction, self.rho_bar, self.c_bar, self.gae_lambda = correction, rho_bar, c_bar, gae_lambda
        self.normalize_advantage = normalize_advantage
        self.model = model
        self.optimizer_factory = optimizer
        self.beta, self.log_epsilon, self.value_coef = beta, log_epsilon, value_coef
        self.reduction, self.grad_clip = reduction, grad_clip
        self.counters = counters         # the run's counters (the run saves them in checkpoints)
        self.version = 0
        self.busy_seconds = 0.0   # time inside training steps (the rest the learner waits for batches)
        self._step_start = 0.0
        self.last_metrics: dict[str, torch.Tensor] = {}   # the last update's losses etc. (the monitor reads them)
        self._step_metrics: dict[str, torch.Tensor] = {}  # the update in progress's, until its gradient norm
        self.autocast_dtype: torch.dtype | None = None  # mixed precision's dtype: predictors act with a copy in it

    def forward(self, obs: torch.Tensor):
        return self.model(obs)

    def evaluate(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and values of every sample of a batch. A recurrent net is unrolled over each rollout from the
        state it began with (resets where an episode starts): rollouts are laid out as (t_max, rollouts),
        padded, and the outputs gathered back into the batch's sample order."""
        if "start_state" not in batch:
            return self.model(batch["obs"])
        rollout, step = batch["rollout"], batch["step"]
        steps, count = batch.get("horizon") or int(batch["lengths"].max()), len(batch["lengths"])
        obs = batch["obs"].new_zeros((steps, count, *batch["obs"].shape[1:]))
        obs[step, rollout] = batch["obs"]
        starts = torch.zeros(steps, count, dtype=torch.bool, device=obs.device)
        starts[step, rollout] = batch["starts"].bool()
        state = batch["start_state"].float()
        logits, values, _ = self.model(obs, (state[:, 0], state[:, 1]), starts)
        return logits[step, rollout], values[step, rollout]

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits, values = self.evaluate(batch)
        returns, advantages, extra = batch["returns"], None, {}
        if self.correction == "vtrace":  # targets from the current policy and values, not the acted ones
            target_logp = torch.log_softmax(logits.float().detach(), -1).gather(
                1, batch["actions"].long().unsqueeze(1)).squeeze(1)
            returns, advantages, rho = vtrace_targets(
                batch["behaviour_logp"], target_logp, batch["rewards"], batch["discounts"], values.detach(),
                batch["bootstrap"], batch["rollout"], batch["step"], batch["lengths"], self.rho_bar, self.c_bar,
                self.gae_lambda, rho_in_advantages=not self.ppo_clip, horizon=batch.get("horizon"))
            extra = dict(vtrace_rho_mean=rho.mean(), vtrace_clipped_share=(rho >= self.rho_bar).float().mean())
        beta = self.beta_at(self.global_step)
        if self.entropy_floor:
            beta = beta * self.log_beta_boost.exp()
        parts = a3c_loss(logits, values, batch["actions"], returns, beta, self.log_epsilon,
                         self.value_coef, self.reduction, advantages, self.normalize_advantage,
                         batch.get("behaviour_logp"), self.ppo_clip)
        if self.entropy_floor:
            self.raise_beta_under_floor(parts["entropy"] / (len(logits) if self.reduction == "sum" else 1),
                                        logits.shape[-1])
        lag = (self.version - batch["versions"]).float().mean()
        # Published with the gradient norm (on_before_optimizer_step): a window must never see one without it.
        self._step_metrics = {k: v.detach() for k, v in (parts | extra).items()} | {
            "policy_lag": lag.detach(), "batch_size": len(batch["actions"]), "beta": beta}
        return parts["loss"]

    def on_before_optimizer_step(self, optimizer) -> None:
        # Clip here (not Trainer(gradient_clip_val)) so the norm is measured either way and checked.
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = nn.utils.get_total_norm(grads)
        if self.grad_clip:
            nn.utils.clip_grads_with_norm_(self.model.parameters(), self.grad_clip, norm)
        self.note_if_nonfinite(self._step_metrics["loss"], norm)
        # A new dict, never a change to the published one: the monitor thread may be iterating it right now.
        self.last_metrics = self._step_metrics | {"grad_norm": norm.detach()}

    NONFINITE_KINDS = ("loss", "gradient norm")

    @torch.no_grad()
    def note_if_nonfinite(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Record the first update whose loss or gradient norm is NaN or infinite, without reading anything back
        to the host (a handful of device operations per update)."""
        values = torch.stack((loss.detach().double(), grad_norm.detach().double()))
        bad = ~torch.isfinite(values)
        loss_bad = bad[0]                              # the loss if it is bad, else the gradient norm
        record = torch.stack((torch.full_like(values[0], self.version), (~loss_bad).double(),
                              torch.where(loss_bad, values[0], values[1])))
        first = bad.any() & (self.first_nonfinite[0] < 0)
        self.first_nonfinite.copy_(torch.where(first, record, self.first_nonfinite))

    def raise_if_nonfinite(self) -> None:
        """FloatingPointError naming the first update whose loss or gradient norm was not finite, if any (one
        read of a device flag: the monitor calls it each window, and every checkpoint is checked first, so the
        last checkpoint written is a good one)."""
        update, kind, value = self.first_nonfinite.tolist()
        if update >= 0:
            raise FloatingPointError(f"{self.NONFINITE_KINDS[int(kind)]} is {value} at update {int(update)}: "
                                     "training stopped (lower the learning rate or enable learner.grad_clip); "
                                     "the last checkpoint is intact")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.raise_if_nonfinite()   # before anything is written: a NaN model never replaces a good checkpoint

    def on_train_batch_start(self, batch, batch_idx) -> None:
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.busy_seconds += time.perf_counter() - self._step_start
        self.version = self.global_step
        if self.counters is not None and not batch.get("repeat"):  # a batch's later passes are not new samples
            self.counters.add(trained_steps=len(batch["actions"]))

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["state_dict"].setdefault("log_beta_boost", torch.zeros(()))   # a checkpoint from before the floor
        # Before any callback's on_fit_start (Lightning restores global_step only after them): agents resumed
        # from here tag their predictions with the restored version, and the first window's rates start from it.
        self.version = int(checkpoint.get("global_step", 0))

    def lr_scale(self, update: int) -> float:
        """The learning rate's factor at `update` (lr_scale_at with this learner's schedule)."""
        return lr_scale_at(update, self.warmup_updates, self.lr_decay_updates, self.lr_final_scale)

    # How fast the entropy floor moves beta: log(factor) changes by this per update per unit of the entropy's
    # shortfall (as a share of the floor). A policy at half the floor doubles beta in ~14 updates; one above it
    # lets the factor decay back to 1 as fast.
    BOOST_RATE = 0.1
    MAX_BOOST = math.log(1000.0)   # beta never grows past 1000x its schedule's value

    @torch.no_grad()
    def raise_beta_under_floor(self, entropy: torch.Tensor, num_actions: int) -> None:
        """The entropy floor: while the policy's mean entropy is under entropy_floor x log(actions), beta grows
        (multiplicatively, each update); above it, beta falls back to its schedule. Adam and RMSprop take steps of
        a set size whatever the gradient's, so once a task is learned and its advantages are noise, the logits
        random-walk apart, the policy hardens, and a near-deterministic softmax has no gradient left to come
        back with (the CartPole collapse, docs/learning.md): the floor keeps the policy out of that corner."""
        floor = self.entropy_floor * math.log(num_actions)
        shortfall = (floor - entropy.detach().float()) / floor
        self.log_beta_boost.add_(self.BOOST_RATE * shortfall).clamp_(0.0, self.MAX_BOOST)

    def beta_at(self, update: int) -> float:
        """The entropy weight at `update` (the module's beta_at with this learner's schedule)."""
        return beta_at(update, self.beta, self.beta_decay_updates, self.beta_final, self.beta_decay_start)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.model.parameters())
        if not (self.warmup_updates or self.lr_decay_updates):
            return optimizer
        # torch's RMSprop starts its squared-gradient average at 0, so its first steps move every weight by
        # ~10x lr whatever the gradient: a linear warm-up of the learning rate keeps them small.
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, self.lr_scale)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

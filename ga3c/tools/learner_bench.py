"""The learner micro-benchmark (`python -m ga3c.tools.bench 'bench.arms=[learner]' net=large`): what one update
and one predictor batch cost, without envs, agents or queues.

Synthetic batches of the configured run's real shapes (game, net, t_max, precision, optimizer, correction) go
straight into the learner, per batch size:
- ms per update through Lightning's fit loop (as a run trains), and split into copy to the device / forward
  and loss / backward / optimizer (clip, check, step) by the same calls made directly; "rest" is what
  Lightning's loop adds;
- operations dispatched and host synchronisations per update and per predictor batch, counted by a
  `TorchDispatchMode` (works on CPU): every aten operation, the ones that make the host wait for the device
  (scalar reads, data-dependent shapes) and device-to-host copies (`.cpu()`, `.tolist()`).
On CUDA each phase is timed with a device synchronisation between phases (only in the split, never in the
counts or the Lightning figure), CUDA's sync debug mode counts the synchronisations it sees during the counted
updates (`cuda_syncs`), and a torch.profiler trace of one update per batch size is written beside bench.md.
"""
from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from torch.utils._python_dispatch import TorchDispatchMode

# aten operations that make the host wait for the device: a value read back, or an output whose shape
# depends on the data (the host must learn it before it can allocate).
SYNC_OPS = {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "equal", "unique", "_unique2",
            "unique_consecutive", "unique_dim", "repeat_interleave", "nonzero_static"}


COUNTED_UPDATES = 3   # updates whose operations are counted, after the timed ones


class DispatchCounter(TorchDispatchMode):
    """Counts the aten operations dispatched while active (autograd's backward included), which of them
    synchronise the host with the device, and the device-to-host copies asked for (`Tensor.cpu`,
    `Tensor.tolist`: on a CPU tensor these are free, on a GPU each waits for all queued work)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self._patched: list[tuple[str, object]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if name in SYNC_OPS or (name == "repeat_interleave" and (kwargs or {}).get("output_size") is None):
            self.syncs[name] += 1
        elif name in ("index", "index_put", "index_put_") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())):
            self.syncs[f"{name}(bool mask)"] += 1   # a boolean mask becomes indices: a data-dependent shape
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for method in ("cpu", "tolist"):
            original = getattr(torch.Tensor, method)

            def counted(tensor, *args, _original=original, _method=method, **kwargs):
                self.syncs[f"Tensor.{_method}"] += 1
                return _original(tensor, *args, **kwargs)

            self._patched.append((method, original))
            setattr(torch.Tensor, method, counted)
        return super().__enter__()

    def __exit__(self, *exc):
        for method, original in self._patched:
            setattr(torch.Tensor, method, original)
        self._patched.clear()
        return super().__exit__(*exc)

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def total_syncs(self) -> int:
        return sum(self.syncs.values())


def synthetic_batch(obs_shape, obs_dtype, num_actions: int, rollouts: int, t_max: int, core: int,
                    rng: np.random.Generator) -> dict:
    """A training batch as the batch assembler builds it: `rollouts` full rollouts of `t_max` steps, laid out
    flat (numpy arrays wrapped as tensors, in host memory)."""
    n = rollouts * t_max
    if np.dtype(obs_dtype) == np.uint8:
        obs = rng.integers(0, 256, (n, *obs_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(n, *obs_shape)).astype(obs_dtype)
    batch = dict(obs=obs, actions=rng.integers(0, num_actions, n).astype(np.int64),
                 returns=rng.normal(size=n).astype(np.float32), versions=np.zeros(n, np.int64),
                 rewards=rng.normal(size=n).astype(np.float32), discounts=np.full(n, 0.99, np.float32),
                 behaviour_logp=np.full(n, -np.log(num_actions), np.float32),
                 rollout=np.repeat(np.arange(rollouts), t_max), step=np.tile(np.arange(t_max), rollouts),
                 bootstrap=rng.normal(size=rollouts).astype(np.float32), lengths=np.full(rollouts, t_max))
    if core:
        batch.update(starts=np.zeros(n, np.bool_), start_state=np.zeros((rollouts, 2, core), np.float32))
    out = {k: torch.from_numpy(v) for k, v in batch.items()}
    out["horizon"] = t_max
    return out


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast_context(precision: str, device: torch.device):
    from ga3c.learner import AUTOCAST_DTYPES

    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None or precision in ("bf16", "16"):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def direct_update(learner, optimizer, batch: dict, device: torch.device, precision: str,
                  phases: dict | None = None) -> None:
    """One update by the learner's own hooks, called directly (what Lightning's automatic optimisation calls),
    each phase timed into `phases` when given."""
    clock = [time.perf_counter()]

    def mark(name: str) -> None:
        if phases is not None:
            _sync(device)
            now = time.perf_counter()
            phases[name] = phases.get(name, 0.0) + now - clock[0]
            clock[0] = now

    batch = to_device(batch, device)
    mark("copy")
    with autocast_context(precision, device):
        loss = learner.training_step(batch, 0)
    mark("forward")
    loss.backward()
    mark("backward")
    learner.on_before_optimizer_step(optimizer)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    mark("optimizer")


def build(cfg: DictConfig):
    """The configured run's model and learner (as algo=ga3c builds them), its shapes and resolved precision."""
    from ga3c.learner import Learner, resolve_precision
    from ga3c.networks import build_network
    from ga3c.runtime import game_spec

    obs_shape, obs_dtype, num_actions = game_spec(cfg)
    torch.manual_seed(cfg.seed)
    model = build_network(cfg.net, obs_shape, num_actions)
    learner = Learner.from_config(model, cfg.learner)
    precision = resolve_precision(cfg.trainer.precision, model, str(cfg.trainer.accelerator))
    return learner, (obs_shape, obs_dtype, num_actions), precision


def lightning_updates(cfg: DictConfig, batches: list[dict], warmup: int, updates: int, precision: str) -> dict:
    """ms per update and ops/syncs per update through Lightning's fit loop over the given batches (cycled)."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, IterableDataset

    learner, _, _ = build(cfg)

    counted = COUNTED_UPDATES
    total = warmup + updates + counted

    class Batches(IterableDataset):
        def __iter__(self):
            for i in range(total):
                yield batches[i % len(batches)]

    class Clock(pl.Callback):
        """Times the updates after the warm-up, then counts the operations of a few more (counting slows
        each operation, so it never runs while the clock does)."""

        def __init__(self):
            self.counter, self.start, self.end, self.counting = DispatchCounter(), None, None, False

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx == warmup - 1:
                _sync(module.device)
                self.start = time.perf_counter()
            elif batch_idx == warmup + updates - 1:
                _sync(module.device)
                self.end = time.perf_counter()
                self.counter.__enter__()
                self.counting = True
                if module.device.type == "cuda":   # CUDA's own account of the syncs: a warning each
                    torch.cuda.set_sync_debug_mode("warn")
            elif batch_idx == total - 1:
                self.counter.__exit__(None, None, None)
                self.counting = False
                if module.device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")

    clock = Clock()
    trainer = pl.Trainer(accelerator=cfg.trainer.accelerator, devices=1, precision=precision, max_epochs=-1,
                         max_steps=total, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[clock])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(learner, DataLoader(Batches(), batch_size=None, num_workers=0))
    finally:
        if clock.counting:   # the loop ended early: leave no mode active
            clock.counter.__exit__(None, None, None)
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("default")
    cuda_syncs = sum("synchroniz" in str(w.message) for w in caught) / counted if torch.cuda.is_available() else None
    if clock.end is None or clock.counting:
        raise RuntimeError("the learner benchmark's fit loop ended before its last update")
    return dict(ms=1e3 * (clock.end - clock.start) / updates, ops=clock.counter.total_ops / counted,
                syncs=clock.counter.total_syncs / counted,
                sync_ops={k: v / counted for k, v in clock.counter.syncs.items()}, device=str(learner.device),
                cuda_syncs=cuda_syncs)


def direct_updates(cfg: DictConfig, batches: list[dict], warmup: int, updates: int, precision: str,
                   device: torch.device, trace: Path | None = None) -> dict:
    """The same updates by direct calls: ms per phase, and ops/syncs per update; on CUDA with `trace`, a
    torch.profiler trace of one update (chrome://tracing or Perfetto reads it)."""
    learner, _, _ = build(cfg)
    learner.to(device)
    configured = learner.configure_optimizers()
    optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
    for i in range(warmup):
        direct_update(learner, optimizer, batches[i % len(batches)], device, precision)
    phases: dict[str, float] = {}
    for i in range(updates):
        direct_update(learner, optimizer, batches[i % len(batches)], device, precision, phases)
    counter = DispatchCounter()
    with counter:
        direct_update(learner, optimizer, batches[0], device, precision)
    if trace is not None and device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            direct_update(learner, optimizer, batches[0], device, precision)
            _sync(device)
        profiler.export_chrome_trace(str(trace))
    return dict(phases_ms={k: 1e3 * v / updates for k, v in phases.items()}, ops=counter.total_ops,
                syncs=counter.total_syncs, sync_ops=dict(counter.syncs))


def predictor_batches(cfg: DictConfig, shapes, sizes: list[int], device: torch.device, precision: str,
                      repeats: int, rng: np.random.Generator) -> dict:
    """ms, ops and syncs of one predictor batch (`ga3c.predictor.act`, with the predictors' acting copy of the
    weights under mixed precision) per batch size."""
    from ga3c.learner import AUTOCAST_DTYPES
    from ga3c.predictor import act

    learner, _, _ = build(cfg)
    model = learner.model.to(device)
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is not None:
        model = copy.deepcopy(model).to(dtype).requires_grad_(False)
    obs_shape, obs_dtype, _ = shapes
    core = int(getattr(model, "core_size", 0))
    out = {}
    for size in sizes:
        batch = synthetic_batch(obs_shape, obs_dtype, 2, 1, size, 0, rng)
        obs = batch["obs"]
        state = np.zeros((size, 2, core), np.float32) if core else None
        starts = np.zeros(size, np.bool_) if core else None
        for _ in range(3):
            act(model, obs, device, state, starts)
        start = time.perf_counter()
        for _ in range(repeats):
            act(model, obs, device, state, starts)
        ms = 1e3 * (time.perf_counter() - start) / repeats
        counter = DispatchCounter()
        with counter:
            act(model, obs, device, state, starts)
        out[size] = dict(ms=ms, ops=counter.total_ops, syncs=counter.total_syncs, sync_ops=dict(counter.syncs))
    return out


def learner_bench(cfg: DictConfig, out: Path | None = None) -> dict:
    """Every figure of the micro-benchmark for the configured run, per training and prediction batch size
    (on CUDA, a profiler trace of one update per batch size into `out`)."""
    settings = cfg.bench.learner
    learner, shapes, precision = build(cfg)
    obs_shape, obs_dtype, num_actions = shapes
    core = int(getattr(learner.model, "core_size", 0))
    t_max = int(cfg.t_max)
    torch.set_num_threads(int(cfg.torch_threads))
    use_cuda = str(cfg.trainer.accelerator) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    rng = np.random.default_rng(cfg.seed)
    warmup, updates = int(settings.warmup_updates), int(settings.updates)
    results = dict(precision=precision, device=str(device), t_max=t_max, torch_threads=int(cfg.torch_threads),
                   parameters=sum(p.numel() for p in learner.model.parameters()), training={}, prediction={})
    for size in settings.batch_sizes:
        rollouts = max(1, int(size) // t_max)
        batches = [synthetic_batch(obs_shape, obs_dtype, num_actions, rollouts, t_max, core, rng) for _ in range(4)]
        fit = lightning_updates(cfg, batches, warmup, updates, precision)
        trace = out / f"learner_trace_b{rollouts * t_max}.json" if out is not None else None
        direct = direct_updates(cfg, batches, warmup, updates, precision, device, trace)
        split = direct["phases_ms"]
        split["rest"] = max(fit["ms"] - sum(split.values()), 0.0)
        results["training"][rollouts * t_max] = dict(ms=fit["ms"], phases_ms=split, ops=fit["ops"],
                                                     syncs=fit["syncs"], sync_ops=fit["sync_ops"],
                                                     cuda_syncs=fit["cuda_syncs"],
                                                     direct_ops=direct["ops"], direct_syncs=direct["syncs"])
        print(f"[bench] learner: batch {rollouts * t_max}: {fit['ms']:.2f} ms/update ("
              + ", ".join(f"{k} {v:.2f}" for k, v in split.items()) + f"), {fit['ops']:.0f} ops, "
              f"{fit['syncs']:.1f} syncs per update", flush=True)
    results["prediction"] = predictor_batches(cfg, shapes, [int(s) for s in settings.prediction_batch_sizes],
                                              device, precision, int(settings.updates), rng)
    for size, p in results["prediction"].items():
        print(f"[bench] predictor: batch {size}: {p['ms']:.2f} ms, {p['ops']} ops, {p['syncs']} syncs", flush=True)
    return results


def markdown(results: dict) -> list[str]:
    """The micro-benchmark's tables (bench.md)."""
    lines = ["## Learner micro-benchmark", "",
             f"Synthetic batches of the run's shapes, no env; device {results['device']}, precision "
             f"{results['precision']}, {results['parameters']:,} parameters, t_max {results['t_max']}, "
             f"torch threads {results['torch_threads']}. ms per update through Lightning's fit loop; the split "
             "by the same calls made directly (rest = what Lightning's loop adds). Ops: aten operations "
             "dispatched; syncs: host waits for the device (scalar reads, data-dependent shapes, device-to-host "
             "copies).", "",
             "| training batch | ms/update | copy | forward+loss | backward | optimizer | rest | ops/update "
             "| syncs/update |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size, r in results["training"].items():
        p = r["phases_ms"]
        lines.append(f"| {size} | {r['ms']:.2f} | {p.get('copy', 0):.2f} | {p.get('forward', 0):.2f} "
                     f"| {p.get('backward', 0):.2f} | {p.get('optimizer', 0):.2f} | {p.get('rest', 0):.2f} "
                     f"| {r['ops']:.0f} | {r['syncs']:.1f} |")
    lines += ["", "| prediction batch | ms/batch | ops/batch | syncs/batch |", "| ---: | ---: | ---: | ---: |"]
    for size, r in results["prediction"].items():
        lines.append(f"| {size} | {r['ms']:.2f} | {r['ops']} | {r['syncs']} |")
    syncs = {k: v for r in results["training"].values() for k, v in r["sync_ops"].items()}
    if syncs:
        lines += ["", "Synchronisations per update: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(syncs.items()))]
    return lines + [""]

"""Checks of a composed config, before any process starts: bad input gets one line naming the key, the value
given and what is allowed.

Every key has an entry in the schema below (SCHEMA, plus the per-class ones for net/, optimizer/ and Lightning's
`trainer.*`). `validate` walks the whole composed config: a key the schema does not know is an error too, so a
new key in conf/ cannot slip through unchecked: it needs a line here (tests/test_validation.py then feeds it
values of the wrong type and out of its range on its own).

Kept free of torch and Lightning imports: bad input is answered in about a second.
"""
from __future__ import annotations

import difflib
import functools
import math
import os
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(ValueError):
    """A config value is invalid. The message names the key and what is allowed."""


def has_cuda_gpu() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch (validation runs before the heavy imports)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine_counts(cores: int, gpu: bool) -> dict[str, int]:
    """Starting counts for a machine. With a GPU, the paper's 32/2/2 (batches >= 32). Without one, the cores
    are shared by envs, acting and training, and fewer threads batch better: 8 agents a core (16 on 2 cores),
    one predictor per 4 cores, 2 trainers, batches >= 128 (on 2 cores 16/1/2 ran Pong at ~7,900 frames/s
    against ~2,650 with 32/2/2 and a policy lag of 5-11 updates against ~26)."""
    if gpu:
        return dict(agents=max(32, 4 * cores), predictors=2, trainers=2, training_min_batch=32)
    return dict(agents=min(64, 8 * cores), predictors=max(1, cores // 4), trainers=2, training_min_batch=128)


def _machine_count(key: str) -> int:
    if key == "cores":   # conf/algo/a3c.yaml: one A3C worker per core
        return usable_cores()
    return machine_counts(usable_cores(), has_cuda_gpu())[key]


# `agents: ${machine:agents}` in conf/config.yaml: counts derived from this machine when the config is read
# (`${machine:cores}`: the usable cores).
if not OmegaConf.has_resolver("machine"):
    OmegaConf.register_new_resolver("machine", _machine_count)


def ale_name(game_id: str) -> str:
    """A game's name from its ALE id (conf/game/atari.yaml): ALE/MsPacman-v5 -> mspacman."""
    return re.sub(r"-v\d+$", "", str(game_id).rsplit("/", 1)[-1]).lower()


if not OmegaConf.has_resolver("ale_name"):
    OmegaConf.register_new_resolver("ale_name", ale_name)

# The precisions GA3C runs with (trainer.precision); Lightning knows a few more (16-true, transformer-engine)
# that the predictors' bf16 copy and the learner's autocast do not handle.
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "32", "bf16", "16", "64-true", "64")


# --- what a key allows ----------------------------------------------------------------------------------
class Spec:
    """What one key allows: `allowed` (said in the message), `ok` (the test) and `bad`: values of the right type
    that are still not allowed (out of range, bad format), which the generated tests feed back in."""

    def __init__(self, allowed: str, ok, bad: tuple = (), null: bool = False, refused: str | None = None):
        self.allowed = allowed + (" or null" if null else "")
        self.ok, self.bad, self.null, self.refused = ok, tuple(bad), null, refused

    def accepts(self, value) -> bool:
        return self.null if value is None else bool(self.ok(value))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def integer(lo: int | None = None, hi: int | None = None, null: bool = False, note: str = "") -> Spec:
    text = (f"an integer in [{lo}, {hi}]" if lo is not None and hi is not None else
            f"an integer >= {lo}" if lo is not None else "an integer")
    bad = tuple(b for b in ((lo - 1) if lo is not None else None, (hi + 1) if hi is not None else None)
                if b is not None)
    return Spec(text + note, lambda v: _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi), bad, null)


def number(lo: float | None = None, hi: float | None = None, above: float | None = None, null: bool = False,
           note: str = "") -> Spec:
    """A finite number in [lo, hi], or > above."""
    if above is not None:
        text, bad = f"a number > {above:g}", (above, above - 1)
    elif lo is not None and hi is not None:
        text, bad = f"a number in [{lo:g}, {hi:g}]", (lo - 0.5, hi + 0.5)
    elif lo is not None:
        text, bad = f"a number >= {lo:g}", (lo - 1,)
    else:
        text, bad = "a finite number", (math.inf,)
    lowest = above if above is not None else lo

    def ok(v):
        return (_is_number(v) and (lowest is None or (v > lowest if above is not None else v >= lowest))
                and (hi is None or v <= hi))
    return Spec(text + note, ok, bad, null)


def boolean(null: bool = False) -> Spec:
    return Spec("true or false", lambda v: isinstance(v, bool), (), null)


def choice(*options, null: bool = False, note: str = "") -> Spec:
    shown = ", ".join(o if isinstance(o, str) else _show(o) for o in options)
    text = f"one of {shown}" if len(options) > 1 else _show(options[0])
    bad = ("no-such-option",) if all(isinstance(o, str) for o in options) else ()
    return Spec(text + note, lambda v: any(type(v) is type(o) and v == o for o in options), bad, null)


def string(pattern: str | None = None, what: str = "a string", bad: tuple = (), null: bool = False,
           max_len: int = 1000) -> Spec:
    regex = re.compile(pattern) if pattern else None
    return Spec(what, lambda v: isinstance(v, str) and 0 < len(v) <= max_len and (regex is None or regex.match(v)),
                bad + ("",), null)


def list_of(item: Spec, what: str, min_len: int = 0, max_len: int | None = None, null: bool = False) -> Spec:
    def ok(v):
        return (isinstance(v, list) and len(v) >= min_len and (max_len is None or len(v) <= max_len)
                and all(item.accepts(x) for x in v))
    bad = tuple([b] * max(min_len, 1) for b in item.bad[:1]) + (([],) if min_len else ())
    return Spec(what, ok, bad, null)


def custom(allowed: str, ok, bad: tuple = (), null: bool = False) -> Spec:
    return Spec(allowed, ok, bad, null)


def anything() -> Spec:
    """Passed on as it is (a class's own keyword, checked by that class when it is built)."""
    return Spec("anything", lambda v: True)


def reserved(reason: str) -> Spec:
    """A key ga3c sets itself: any value is refused, with the reason."""
    return Spec("not set", lambda v: False, refused=reason)


def _show(value) -> str:
    """A value as the user would write it (YAML), cut to one short line."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list):
        text = "[" + ", ".join(_show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- the schema -----------------------------------------------------------------------------------------
POSITIVE = number(above=0)
NON_NEGATIVE = number(lo=0)
FRACTION = number(0, 1)
COUNT = integer(1)
PATH = string(r"^[^\0]*$", "a path")
NAME = string(r"^[\w.-]+$", "a name of letters, digits, '_', '.' or '-'", bad=("a b/c",))
TARGET = string(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+$", "a dotted import path (package.module.Class)",
                bad=("not a class",))
# W&B refuses these characters in project, entity and run ids; tags are 1-64 characters.
WANDB_NAME = string(r"^[^/\\#?%:]+$", "a string without / \\ # ? % :", bad=("a/b",), max_len=128)
GYM_ID = string(r"^(?:[\w.]+:)?(?:[\w:-]+/)?[\w:.-]+?(?:-v\d+)?$",
                "a gymnasium id (ALE/Pong-v5, CartPole-v1, package.module:Name-v0)", bad=("Pong v5!",))


def _max_time_ok(v) -> bool:
    """Lightning's Timer takes DD:HH:MM:SS or a dict of timedelta fields."""
    if isinstance(v, str):
        parts = v.split(":")
        return len(parts) == 4 and all(p.strip().isdigit() for p in parts) and any(int(p) for p in parts)
    fields = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
    return (isinstance(v, dict) and bool(v) and all(k in fields and _is_number(x) and x >= 0 for k, x in v.items())
            and any(v.values()))


def _devices_ok(v) -> bool:
    return (v == 1 and _is_int(v)) or v == "1" or (isinstance(v, list) and len(v) == 1 and _is_int(v[0]) and v[0] >= 0)


# Keys of conf/config.yaml (every run needs them) and of conf/learncurve.yaml and conf/bench.yaml.
SCHEMA: dict[str, Spec] = {
    "seed": integer(0, 2**32 - 1),
    "max_frames": integer(1, null=True),
    "stop_score": number(null=True),
    "ckpt_path": string(what="the path of a checkpoint file", null=True),
    "output_dir": PATH,
    "agents": integer(1, 4096),
    "predictors": integer(1, 64),
    "trainers": integer(1, 64),
    "t_max": integer(1, 1000),
    "prediction_max_batch": COUNT,
    "training_min_batch": integer(0, note=" (0 = each rollout alone)"),
    "training_max_batch": COUNT,
    "batch_queue_size": COUNT,
    "rollout_slots": integer(1, 64),
    "torch_threads": integer(1, 1024),
    "stall_seconds": number(lo=0, note=" (0 = never)"),
    "objective": choice("score_mean_100", "episode_length_mean_100", "fps", "fps_run_mean", "pps", "tps",
                        "samples_per_s", "samples_per_s_run_mean", "frames", "episodes", "updates",
                        "seconds_to_stop_score", "policy_lag_mean", "wall_seconds",
                        note=" (a key of summary.json)"),
    "learner.gamma": FRACTION,
    "learner.gae_lambda": FRACTION,
    "learner.beta": NON_NEGATIVE,
    "learner.log_epsilon": number(0, 1),
    "learner.value_coef": NON_NEGATIVE,
    "learner.reduction": choice("sum", "mean"),
    "learner.grad_clip": number(lo=0, note=" (0 = off)"),
    "learner.reward_clip": number(lo=0, note=" (0 = no clipping)"),
    "learner.correction": choice("none", "vtrace"),
    "learner.rho_bar": POSITIVE,
    "learner.c_bar": POSITIVE,
    "learner.normalize_advantage": boolean(),
    "learner.warmup_updates": integer(0, note=" (0 = off)"),
    "learner.epochs": integer(1, 100),
    "learner.ppo_clip": number(0, 1, note=" (0 = off)"),
    "checkpoint.every_minutes": POSITIVE,
    "checkpoint.keep": integer(0, note=" (periodic checkpoints kept)"),
    "log.every_seconds": POSITIVE,
    "log.progress": boolean(),
    "log.score_window": integer(1, 1_000_000),
    "wandb.mode": choice("online", "offline", "disabled"),
    "wandb.project": WANDB_NAME,
    "wandb.entity": string(r"^[^/\\#?%:]+$", "a W&B entity (user or team)", bad=("a/b",), null=True),
    "wandb.group": string(what="a string of at most 128 characters", null=True, max_len=128),
    "wandb.tags": list_of(string(what="a tag", max_len=64), "a list of tags (strings of 1-64 characters)"),
    "wandb.name": string(what="a string of at most 128 characters", null=True, max_len=128),
    "wandb.id": string(r"^[\w-]+$", "a W&B run id (letters, digits, '_', '-'; at most 64)", bad=("a b",),
                       null=True, max_len=64),
    "video.every_minutes": number(lo=0, note=" (0 = off)"),
    "video.max_steps": COUNT,
    "video.greedy": boolean(),
    # game/: gymnasium or ALE id and the Atari preprocessing (ga3c/env.py)
    "game.name": NAME,
    "game.id": GYM_ID,
    "game.atari": boolean(),
    "game.frame_skip": integer(1, 100),
    "game.frame_stack": integer(1, 64),
    "game.screen_size": integer(16, 1024),
    "game.max_pool": boolean(),
    "game.sticky_actions": FRACTION,
    "game.noop_max": integer(0, 10_000),
    "game.terminal_on_life_loss": boolean(),
    "game.fire_on_reset": boolean(),
    "game.anchors.*": number(null=True),
    "game.max_episode_frames": integer(1, null=True),
    "game.thresholds": list_of(number(), "a list of scores", null=True),
    "algo.name": choice("ga3c", "a3c", "ceiling"),
    # autotune/: the count tuner (ga3c/autotune.py)
    "autotune.name": choice("off", "compass", "ga3c"),
    "autotune.objective": choice("tps", "samples_per_s", "fps"),
    "autotune.lag_penalty": NON_NEGATIVE,
    "autotune.wait_seconds": NON_NEGATIVE,
    "autotune.period_seconds": POSITIVE,
    "autotune.settle_seconds": NON_NEGATIVE,
    "autotune.max_agents": integer(1, 4096),
    "autotune.max_predictors": integer(1, 64),
    "autotune.max_trainers": integer(1, 64),
    "autotune.seed": integer(0, 2**32 - 1, null=True),
    "autotune.params.z": POSITIVE,
    "autotune.params.z_reject": NON_NEGATIVE,
    "autotune.params.min_gain": NON_NEGATIVE,
    "autotune.params.noise_prior": POSITIVE,
    "autotune.params.prior_weight": POSITIVE,
    "autotune.params.outlier_clip": POSITIVE,
    "autotune.params.transient_sd": POSITIVE,
    "autotune.params.max_repeats": COUNT,
    "autotune.params.memory": COUNT,
    "autotune.params.agent_ratios": list_of(number(above=1), "a list of ratios > 1", min_len=1),
    "autotune.params.shift_threshold": POSITIVE,
    "autotune.params.shift_windows": COUNT,
    "autotune.params.shift_z": POSITIVE,
    "autotune.params.reprobe_every": integer(0, note=" (0 = only on a shift)"),
    "autotune.params.reprobe_backoff": number(lo=1),
    # conf/learncurve.yaml (python -m ga3c.tools.learncurve)
    "seeds": integer(1, 1000),
    "minutes": POSITIVE,
    "learncurve.arms": list_of(NAME, "a non-empty list of arm names", min_len=1),
    "learncurve.arm_overrides.*": list_of(string(what="an override"), "a list of train.py overrides"),
    "learncurve.thresholds": list_of(number(), "a list of scores", min_len=1, null=True),
    "learncurve.analyze_only": boolean(),
    "learncurve.rerun": boolean(),
    "learncurve.a3c_agents": integer(1, 4096, null=True),
    "learncurve.grid_points": integer(2, 100_000),
    # conf/suite.yaml (python -m ga3c.tools.suite)
    "games": list_of(NAME, "a non-empty list of game names", min_len=1),
    "suite.random_episodes": integer(1, 100_000),
    "suite.eval_episodes": integer(0, 100_000),
    "suite.score_at_minutes": list_of(POSITIVE, "a list of minutes > 0", min_len=1),
    "suite.analyze_only": boolean(),
    # conf/bench.yaml (python -m ga3c.tools.bench)
    "bench.seconds_per_arm": POSITIVE,
    "bench.warmup_seconds": NON_NEGATIVE,
    "bench.arms": list_of(choice("ceiling", "a3c", "ga3c"), "a non-empty list of ceiling, a3c, ga3c", min_len=1),
    "bench.a3c_agents": integer(1, 4096, null=True),
    "bench.arm_overrides.*": list_of(string(what="an override"), "a list of train.py overrides"),
    "bench.log_every_seconds": POSITIVE,
    "bench.poll_seconds": POSITIVE,
    "bench.startup_grace_seconds": POSITIVE,
}

# Keys every run reads (a missing one, `~key`, would fail mid-start-up); the rest may be absent.
REQUIRED = tuple(k for k in SCHEMA if k.split(".")[0] not in (
    "game", "algo", "autotune", "video", "seeds", "minutes", "learncurve", "bench", "games", "suite")) + (
    "game.name", "game.id", "algo.name", "autotune.name", "net._target_", "learner.optimizer._target_",
    "learner.optimizer.lr")

# net/: each network class and its keywords (ga3c/networks.py). Another class (net._target_=...) may take
# any keywords its constructor has.
INITS = choice("orthogonal", "torch")
LAYERS = list_of(integer(1, 4096), "a non-empty list of integers >= 1", min_len=1, max_len=16)
NETS: dict[str, dict[str, Spec]] = {
    "ga3c.networks.ConvActorCritic": dict(channels=LAYERS, kernels=LAYERS, strides=LAYERS,
                                          hidden=integer(1, 65536), init=INITS),
    "ga3c.networks.MLPActorCritic": dict(hidden=LAYERS, init=INITS),
    "ga3c.networks.RecurrentActorCritic": dict(core=integer(1, 65536), channels=LAYERS, kernels=LAYERS,
                                               strides=LAYERS, hidden=integer(1, 65536), init=INITS),
}

# optimizer/ (the `learner.optimizer` node): typed keywords of the optimizers conf/ names; their other keywords
# pass on as they are. A class not listed may take any keywords its constructor has.
_TORCH_FLAGS = dict.fromkeys(("foreach", "maximize", "capturable", "differentiable"), anything())
OPTIMIZERS: dict[str, dict[str, Spec]] = {
    "ga3c.learner.RMSpropTF": dict(lr=POSITIVE, alpha=FRACTION, eps=NON_NEGATIVE, momentum=number(0, 1)),
    "torch.optim.RMSprop": dict(lr=POSITIVE, alpha=FRACTION, eps=NON_NEGATIVE, momentum=number(0, 1),
                                weight_decay=NON_NEGATIVE, centered=boolean(), **_TORCH_FLAGS),
    "torch.optim.Adam": dict(lr=POSITIVE, betas=list_of(number(0, 1), "two numbers in [0, 1]", 2, 2),
                             eps=NON_NEGATIVE, weight_decay=NON_NEGATIVE, amsgrad=boolean(), fused=anything(),
                             decoupled_weight_decay=boolean(), **_TORCH_FLAGS),
}
OPTIMIZER_COMMON = {"_target_": TARGET, "_partial_": choice(True, note=" (the learner passes the parameters)")}

# trainer.*: any keyword of Lightning's Trainer (trainer_keywords(), read from the installed Lightning). The
# common ones are typed; Lightning checks the rest when the run builds its Trainer, and a refusal there is
# reported like any bad input (ga3c/algos/ga3c.py).
ONE_PROCESS = "GA3C trains one model in one process"
TRAINER: dict[str, Spec] = {
    "max_time": custom("DD:HH:MM:SS (e.g. 00:01:30:00), a dict of timedelta fields", _max_time_ok,
                       bad=("1:30", "00:00:00:00", "aa:bb:cc:dd"), null=True),
    "accelerator": choice("auto", "cpu", "gpu", "cuda"),
    "devices": custom(f"1 or a list of one device index, e.g. [0] ({ONE_PROCESS})", _devices_ok, bad=(2, [0, 1])),
    "precision": custom(f"one of {', '.join(PRECISIONS)}",
                        lambda v: (isinstance(v, str) or _is_int(v)) and str(v) in PRECISIONS, bad=("bf17",)),
    "strategy": choice("auto", note=f" ({ONE_PROCESS})"),
    "num_nodes": choice(1, note=f" ({ONE_PROCESS})"),
    "max_steps": integer(-1, note=" (-1 = no limit)"),
    "min_steps": integer(0, null=True),
    "min_epochs": integer(0, null=True),
    "fast_dev_run": custom("true, false or an integer >= 0", lambda v: isinstance(v, bool) or (_is_int(v) and v >= 0),
                           bad=(-1,)),
    "accumulate_grad_batches": integer(1, 10_000),
    "limit_train_batches": custom("a number in [0, 1] or an integer >= 0", lambda v: _is_number(v) and v >= 0 and
                                  (_is_int(v) or v <= 1), bad=(-1, 1.5), null=True),
    "logger": choice(True, note=" (W&B is set by wandb.mode: wandb.mode=disabled turns it off)"),
    "enable_progress_bar": boolean(),
    "enable_model_summary": boolean(),
    "deterministic": choice(True, False, "warn", null=True),
    "benchmark": boolean(null=True),
    "inference_mode": boolean(),
    "detect_anomaly": boolean(),
    "profiler": choice("simple", "advanced", "pytorch", null=True),
    "barebones": choice(False, note=" (ga3c's monitor logs through the Trainer)"),
    "enable_autolog_hparams": boolean(),
    "reload_dataloaders_every_n_epochs": choice(0, note=" (the experience stream is one endless epoch)"),
    # Set by ga3c itself (ga3c/algos/ga3c.py):
    "max_epochs": reserved("the experience stream is one endless epoch; stop with max_frames, trainer.max_time "
                           "or trainer.max_steps"),
    "callbacks": reserved("ga3c installs its own callbacks"),
    "default_root_dir": reserved("the run directory is hydra.run.dir"),
    "num_sanity_val_steps": reserved("GA3C has no validation loop"),
    "log_every_n_steps": reserved("ga3c logs every log.every_seconds"),
    "enable_checkpointing": reserved("ga3c always checkpoints (checkpoint.every_minutes, checkpoint.keep)"),
    "gradient_clip_val": reserved("use learner.grad_clip (the learner clips and checks the norm itself)"),
    "gradient_clip_algorithm": reserved("use learner.grad_clip"),
    "plugins": reserved("precision is set by trainer.precision"),
}
# Nodes that hold keys (not values): the walk goes into them.
SECTIONS = {k.rsplit(".", i)[0] for k in SCHEMA for i in range(1, k.count(".") + 1)} | {
    "net", "learner.optimizer", "trainer"}


# --- the walk -------------------------------------------------------------------------------------------
def _import(target: str, key: str):
    """The class a `_target_` names (another net or optimizer than ours): imported only then, it may be heavy."""
    import importlib

    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as error:  # noqa: BLE001 - any import failure is the same mistake for the user
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"{key} {target!r} cannot be imported: {reason}") from None


def _parameters(cls) -> set[str]:
    import inspect

    return {p.name for p in inspect.signature(cls).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


@functools.cache
def trainer_keywords() -> frozenset[str]:
    """The keywords of the installed Lightning's Trainer, read from its source with `ast`: validation then needs
    no copied list and not the seconds-long import of Lightning and torch. Imported only if the source moved."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("pytorch_lightning")  # finds the package without importing it
    try:
        tree = ast.parse((Path(spec.origin).parent / "trainer" / "trainer.py").read_text())
        init = next(f for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == "Trainer"
                    for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        return frozenset(a.arg for a in init.args.args + init.args.kwonlyargs if a.arg != "self")
    except (AttributeError, OSError, StopIteration, SyntaxError, TypeError):
        import pytorch_lightning as pl

        return frozenset(_parameters(pl.Trainer.__init__)) - {"self"}


def _trainer_accepts(name: str) -> bool:
    return name in trainer_keywords()


def _class_keys(kind: str, known: dict, tree: dict, key: str, name: str) -> Spec | None:
    """The spec of `name` under a node that a class is built from (net, learner.optimizer)."""
    target = tree.get("_target_")
    if name == "_target_":
        return TARGET
    specs = known.get(target)
    if specs is not None:
        return specs.get(name)
    if name.startswith("_") or not TARGET.accepts(target):
        return None
    return anything() if name in _parameters(_import(target, f"{kind}._target_")) else None


def spec_for(root: dict, key: str) -> Spec | None:
    """The spec of a dotted key of the composed config, or None when the key is not one of ours."""
    if key in SCHEMA:
        return SCHEMA[key]
    section, _, name = key.rpartition(".")
    if section + ".*" in SCHEMA:
        return SCHEMA[section + ".*"]
    if section == "net":
        return _class_keys("net", NETS, _get(root, "net", {}), key, name)
    if section == "learner.optimizer":
        return OPTIMIZER_COMMON.get(name) or _class_keys("learner.optimizer", OPTIMIZERS,
                                                         _get(root, "learner.optimizer", {}), key, name)
    if section == "trainer":
        return TRAINER.get(name) or (anything() if _trainer_accepts(name) else None)
    return None


def unknown_key_message(key: str, override: str | None = None) -> str:
    """What to say about a key that is not in the composed config. `override`: the user's `key=value`, when
    Hydra refused it because the key is not there yet (keys the schema knows are added with a leading +)."""
    section, _, name = key.rpartition(".")
    addable = (key in SCHEMA or section + ".*" in SCHEMA or section in ("net", "learner.optimizer")
               or (section == "trainer" and (name in TRAINER or _trainer_accepts(name))))
    if override and addable:
        return f"{key} is not in the config: add it with +{override}"
    if section == "trainer":
        close = difflib.get_close_matches(name, sorted(trainer_keywords()), n=1)
        hint = f"; did you mean trainer.{close[0]}?" if close else ""
        return f"{key} is not a keyword of Lightning's Trainer{hint}"
    close = difflib.get_close_matches(key, [k for k in SCHEMA if "*" not in k], n=1)
    hint = f"; did you mean {close[0]}?" if close else " (every key is declared in ga3c/config.py's SCHEMA)"
    return f"{key} is not a config key{hint}"


def _unknown(root: dict, key: str) -> ConfigError:
    section = key.rpartition(".")[0]
    if section in ("net", "learner.optimizer"):
        target = _get(root, f"{section}._target_")
        known = sorted((NETS if section == "net" else OPTIMIZERS).get(target, {}))
        listed = f" (its keys: {', '.join(known)})" if known else ""
        return ConfigError(f"{key} is not a keyword of {target}{listed}")
    return ConfigError(unknown_key_message(key))


def _check_value(key: str, spec: Spec, value) -> None:
    if spec.accepts(value):
        return
    if spec.refused:
        raise ConfigError(f"{key} cannot be set: {spec.refused}")
    hint = ""
    if isinstance(value, float) and value.is_integer() and "integer" in spec.allowed:
        hint = f" (an integer: write {int(value):_})"
    raise ConfigError(f"{key} must be {spec.allowed}, got {_show(value)}{hint}")


def _walk(root: dict, node: dict, prefix: str = "") -> None:
    for name, value in node.items():
        key = f"{prefix}{name}"
        if key == "hydra":  # Hydra's own node (present only in compose(return_hydra_config=True))
            continue
        spec = spec_for(root, key)
        if spec is not None:
            _check_value(key, spec, value)
        elif key in SECTIONS and isinstance(value, dict):
            _walk(root, value, key + ".")
        elif key in SECTIONS:
            raise ConfigError(f"{key} must be a group of keys, got {_show(value)}")
        else:
            raise _unknown(root, key)


def _get(tree: dict, key: str, default=None):
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return default
        tree = tree[part]
    return tree


_MISSING = object()


def _resolve(cfg) -> dict:
    """The config as plain values, interpolations (${machine:agents}, ${game.name}) resolved."""
    if isinstance(cfg, dict):
        return cfg
    try:
        tree = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "a key"
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        missing = re.search(r"Missing mandatory value: (\S+)", message)
        if missing:  # `id: ???` of conf/game/atari.yaml, or any other key left for the user to give
            example = " (e.g. game.id=ALE/Asterix-v5)" if missing.group(1) == "game.id" else ""
            raise ConfigError(f"{missing.group(1)} must be given: it has no default{example}") from None
        raise ConfigError(f"{key} cannot be resolved: {message}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"the config must be a mapping of keys, got {_show(tree)}")
    return tree


def _check_together(tree: dict) -> None:
    """Constraints between keys, and the files and directories the run needs."""
    get = lambda key: _get(tree, key, _MISSING)  # noqa: E731
    if tree["training_min_batch"] > tree["training_max_batch"]:
        raise ConfigError(f"training_min_batch ({tree['training_min_batch']}) must not exceed training_max_batch "
                          f"({tree['training_max_batch']})")
    net = tree["net"]
    if net.get("_target_") == "ga3c.networks.ConvActorCritic":
        lengths = {k: len(net[k]) for k in ("channels", "kernels", "strides") if k in net}
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"net.channels, net.kernels and net.strides must have one entry per layer each, "
                              f"got lengths {lengths}")
    game = tree["game"]
    if not game.get("atari", False):
        if game.get("frame_skip", 1) != 1:  # only the Atari wrapper skips frames: frames would be miscounted
            raise ConfigError(f"game.frame_skip must be 1 for a game that is not Atari (game.atari=false), "
                              f"got {_show(game['frame_skip'])}")
        atari_only = [k for k in ("frame_stack", "screen_size", "max_pool", "sticky_actions", "noop_max",
                                  "terminal_on_life_loss", "fire_on_reset") if k in game]
        if atari_only:
            raise ConfigError(f"game.{atari_only[0]} applies to Atari games only (game.atari=true); "
                              f"{game['id']!r} is not one")
    if game.get("max_episode_frames") is not None and game["max_episode_frames"] < game.get("frame_skip", 1):
        raise ConfigError(f"game.max_episode_frames ({game['max_episode_frames']}) must be at least game.frame_skip "
                          f"({game.get('frame_skip', 1)})")
    if tree["autotune"]["name"] != "off":
        for name in ("objective", "wait_seconds", "period_seconds", "max_agents", "max_predictors", "max_trainers"):
            if get(f"autotune.{name}") is _MISSING:
                raise ConfigError(f"autotune.{name} is missing: autotune={tree['autotune']['name']} needs it")
    accelerator = _get(tree, "trainer.accelerator", "auto")
    if accelerator in ("gpu", "cuda") and not (has_cuda_gpu() or Path("/dev/nvidia0").exists()):
        raise ConfigError(f"trainer.accelerator={accelerator} but no NVIDIA GPU is visible; use auto or cpu")
    if tree["ckpt_path"] is not None and not Path(tree["ckpt_path"]).is_file():
        raise ConfigError(f"ckpt_path {tree['ckpt_path']!r} does not exist or is not a file")
    check_creatable(Path(tree["output_dir"]), "output_dir")


def validate(cfg: DictConfig | dict) -> None:
    """Check every key of a composed config (train.py's, or learncurve's and bench's, which include it): its
    type, range and format, that the schema knows it, and the constraints between keys. Raises ConfigError
    with one line naming the key, the value given and what is allowed. Starts nothing, creates nothing."""
    tree = _resolve(cfg)
    for key in REQUIRED:
        if _get(tree, key, _MISSING) is _MISSING:
            raise ConfigError(f"{key} is missing: every run needs it (conf/config.yaml defines it)")
    for key in ("net._target_", "learner.optimizer._target_"):  # first: the other keys of the node depend on it
        if _get(tree, key, _MISSING) is not _MISSING:
            _check_value(key, TARGET, _get(tree, key))
    _walk(tree, tree)
    _check_together(tree)


# --- Hydra's own errors --------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    noise = ("full_key:", "object_type=", "Config search path", "provider=", "Set the environment variable")
    return "; ".join(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith(noise))


def hydra_error_message(error: BaseException) -> str | None:
    """One line for an error Hydra raises before any of our code runs (composing conf/ with the overrides,
    creating the run directory); None for any other error."""
    from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException, OverrideParseException

    if isinstance(error, MissingConfigException):  # game=nosuch, hydra/launcher=nosuch, --config-name nosuch
        missing = error.missing_cfg_file or "?"
        if error.options:
            return f"there is no option {missing!r} (conf/{missing}.yaml); the options: {', '.join(error.options)}"
        return f"there is no config {missing!r}: {_one_line(str(error))}"
    if isinstance(error, OverrideParseException):  # agents=[1
        return (f"cannot read the override {error.override!r}: {_one_line(error.message).split('; See ')[0]} "
                "(the syntax: https://hydra.cc/docs/advanced/override_grammar/basic/)")
    cause = error.__cause__
    if (isinstance(error, ConfigCompositionException) and isinstance(cause, OmegaConfBaseException)
            and getattr(cause, "full_key", None) and "not in struct" in str(cause)):  # nosuchkey=1
        wanted = re.search(r"use \+(\S+)", str(error))
        return unknown_key_message(cause.full_key, wanted.group(1) if wanted else None)
    if isinstance(error, (HydraException, OmegaConfBaseException)):
        return _one_line(str(error))
    if isinstance(error, OSError):  # Hydra creates the run directory (and train.log in it) first
        where = f" {error.filename!r}" if error.filename else ""
        return f"output directory{where} cannot be created: {error.strerror or error}"
    return None


# --- the run directory ----------------------------------------------------------------------------------
def check_creatable(path: Path, what: str = "output directory") -> None:
    """A directory that exists and is writable, or can be created: its nearest existing parent is a writable
    directory. Creates nothing (Hydra creates the run directory; ga3c.algos.ga3c probes it with a write)."""
    path = Path(path).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{what} {str(path)!r} cannot be created: {str(existing)!r} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {str(path)!r} cannot be created: {str(existing)!r} is not writable")


def check_output_dir(path: Path) -> None:
    """Fail at start, not at the first checkpoint, when the run directory cannot be written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write_probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"output directory {str(path)!r} is not writable: {error.strerror or error}") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"output directory {str(path)!r} is not writable")

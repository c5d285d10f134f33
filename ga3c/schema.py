"""What every config key allows: one pydantic model per config group (conf/<group>/ -> a class here), so the
checks are pydantic's (strict types, ranges, formats, unknown keys) and ga3c.config.validate only turns the first
failure into one line. Defaults live in conf/ alone: a key is required here or optional, never given a value.

A key added to conf/ needs a field here (an unknown key is an error), and tests/test_validation.py then feeds it
values of the wrong type and out of the range declared here on its own. `Allowed` gives the words of a message
where the type and range do not say it (a path, a name), and values that must be refused, for those tests.

Kept free of torch and Lightning imports: bad input is answered in about a second.
"""
from __future__ import annotations

import functools
import math
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo


class Allowed:
    """Field metadata: what a message says the key allows (`text`), and values of the right type that are still
    refused (`invalid`: bad formats, out-of-range values a custom check catches), for the generated tests."""

    def __init__(self, text: str, invalid: tuple = ()):
        self.text, self.invalid = text, tuple(invalid)


class Section(BaseModel):
    """A group of keys: strict types (no '5' for 5, no 2e7 for an integer), finite numbers, no unknown keys."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _checked(test, text: str, invalid: tuple = ()):
    """A value accepted by `test` (a check pydantic's constraints cannot say)."""
    def check(value):
        if not test(value):
            raise ValueError(text)
        return value
    return Annotated[Any, AfterValidator(check), Allowed(text, invalid)]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _string(pattern: str | None, text: str, invalid: tuple = (), max_length: int = 1000):
    return Annotated[str, Field(min_length=1, max_length=max_length, pattern=pattern), Allowed(text, invalid + ("",))]


# Types several groups use.
Count = Annotated[int, Field(ge=1)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
Text = _string(None, "a string")
PathText = _string(r"^[^\x00]*$", "a path")
Name = _string(r"^[\w.-]+$", "a name of letters, digits, '_', '.' or '-'", ("a b/c",))
TARGET_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$"
Target = _string(TARGET_PATTERN, "a dotted import path (package.module.Class)",
                 ("not a class",))
# W&B refuses these characters in project, entity and run ids; tags are 1-64 characters.
WandbName = _string(r"^[^/\\#?%:]+$", "a string without / \\ # ? % :", ("a/b",), max_length=128)
GymId = _string(r"^(?:[\w.]+:)?(?:[\w:-]+/)?[\w:.-]+?(?:-v\d+)?$",
                "a gymnasium id (ALE/Pong-v5, CartPole-v1, package.module:Name-v0)", ("Pong v5!",))
Overrides = Annotated[list[Text], Allowed("a list of train.py overrides")]


def _is_seeds(value) -> bool:
    """A count N (seeds 0 .. N-1) or a list of distinct seed numbers (seeds=[2]: a third seed of a study)."""
    if _is_int(value):
        return 1 <= value <= 1000
    return (isinstance(value, list) and 0 < len(value) <= 1000
            and all(_is_int(seed) and 0 <= seed <= 2**32 - 1 for seed in value) and len(set(value)) == len(value))


Seeds = _checked(_is_seeds, "a number of seeds in [1, 1000] or a non-empty list of distinct seed numbers >= 0",
                 (0, 1001, [], [1, 1], [-1], [True]))


def _ranged_list(item, text: str, min_length: int = 0, max_length: int | None = None):
    return Annotated[list[item], Field(min_length=min_length, max_length=max_length), Allowed(text)]


# --- conf/config.yaml's groups of keys -------------------------------------------------------------------
class Learner(Section):
    """learner: the loss and its targets (ga3c/learner.py). `optimizer` is checked by its class (OPTIMIZERS)."""
    gamma: Fraction
    gae_lambda: Fraction
    beta: NonNegative
    beta_decay_updates: int = Field(ge=0, description="0 = off")
    beta_decay_start: int = Field(ge=0, description="updates at beta before the schedule starts")
    beta_final: NonNegative
    log_epsilon: Fraction
    value_coef: NonNegative
    reduction: Literal["sum", "mean"]
    grad_clip: float = Field(ge=0, description="0 = off")
    reward_clip: float = Field(ge=0, description="0 = no clipping")
    correction: Literal["none", "vtrace"]
    rho_bar: Positive
    c_bar: Positive
    normalize_advantage: bool
    warmup_updates: int = Field(ge=0, description="0 = off")
    lr_decay_updates: int = Field(ge=0, description="0 = off")
    lr_final_scale: Fraction
    epochs: int = Field(ge=1, le=100)
    ppo_clip: float = Field(ge=0, le=1, description="0 = off")
    entropy_floor: Fraction
    optimizer: dict


class Checkpoint(Section):
    every_minutes: Positive
    keep: int = Field(ge=0, description="periodic checkpoints kept")


class Log(Section):
    every_seconds: Positive
    progress: bool
    score_window: int = Field(ge=1, le=1_000_000)
    entropy_floor: Fraction
    score_drop: Fraction


class Wandb(Section):
    mode: Literal["online", "offline", "disabled"]
    project: WandbName
    entity: _string(r"^[^/\\#?%:]+$", "a W&B entity (user or team)", ("a/b",)) | None
    group: _string(None, "a string of at most 128 characters", max_length=128) | None
    tags: _ranged_list(_string(None, "a tag", max_length=64), "a list of tags (strings of 1-64 characters)")
    name: _string(None, "a string of at most 128 characters", max_length=128) | None
    id: _string(r"^[\w-]+$", "a W&B run id (letters, digits, '_', '-'; at most 64)", ("a b",), 64) | None


class Video(Section):
    every_minutes: float = Field(None, ge=0, description="0 = off")
    max_steps: Count = None
    greedy: bool = None


class Game(Section):
    """game/: the gymnasium or ALE id and the Atari preprocessing (ga3c/env.py); only name and id are needed."""
    name: Name
    id: GymId
    atari: bool = None
    frame_skip: int = Field(None, ge=1, le=100)
    frame_stack: int = Field(None, ge=1, le=64)
    screen_size: int = Field(None, ge=16, le=1024)
    max_pool: bool = None
    sticky_actions: Fraction = None
    noop_max: int = Field(None, ge=0, le=10_000)
    terminal_on_life_loss: bool = None
    fire_on_reset: bool = None
    anchors: dict[str, float | None] = None     # published scores, by source (conf/game/atari.yaml)
    max_episode_frames: int | None = Field(None, ge=1)
    thresholds: _ranged_list(float, "a list of scores") | None = None


class Algo(Section):
    name: Literal["ga3c", "a3c", "ceiling"]


class AutotuneParams(Section):
    """autotune.params: the compass tuner's statistics (ga3c/autotune.py)."""
    z: Positive = None
    z_reject: NonNegative = None
    min_gain: NonNegative = None
    noise_prior: Positive = None
    prior_weight: Positive = None
    outlier_clip: Positive = None
    transient_sd: Positive = None
    max_repeats: Count = None
    memory: Count = None
    agent_ratios: _ranged_list(Annotated[float, Field(gt=1)], "a list of ratios > 1", 1) = None
    shift_threshold: Positive = None
    shift_windows: Count = None
    shift_z: Positive = None
    reprobe_every: int = Field(None, ge=0, description="0 = only on a shift")
    reprobe_backoff: float = Field(None, ge=1)


class Autotune(Section):
    """autotune/: the count tuner (ga3c/autotune.py); its keys are needed once it is on (ga3c.config)."""
    name: Literal["off", "compass", "ga3c"]
    objective: Literal["tps", "samples_per_s", "fps"] = None
    lag_penalty: NonNegative = None
    wait_seconds: NonNegative = None
    period_seconds: Positive = None
    settle_seconds: NonNegative = None
    max_agents: int = Field(None, ge=1, le=4096)
    max_predictors: int = Field(None, ge=1, le=64)
    max_trainers: int = Field(None, ge=1, le=64)
    seed: Seed | None = None
    params: AutotuneParams = None


# --- the tools' groups (conf/learncurve.yaml, conf/suite.yaml, conf/bench.yaml) -------------------------
class Learncurve(Section):
    arms: _ranged_list(Name, "a non-empty list of arm names", 1)
    arm_overrides: dict[str, Overrides] = None
    thresholds: _ranged_list(float, "a list of scores", 1) | None
    analyze_only: bool
    rerun: bool
    a3c_agents: int | None = Field(ge=1, le=4096)
    grid_points: int = Field(ge=2, le=100_000)


class Suite(Section):
    random_episodes: int = Field(ge=1, le=100_000)
    eval_episodes: int = Field(ge=0, le=100_000)
    score_at_minutes: _ranged_list(Positive, "a list of minutes > 0", 1)
    analyze_only: bool
    include: list[str]


class LearnerBench(Section):
    batch_sizes: _ranged_list(Count, "a non-empty list of batch sizes", 1)
    prediction_batch_sizes: _ranged_list(Count, "a non-empty list of batch sizes", 1)
    updates: Count
    warmup_updates: Count


class Bench(Section):
    seconds_per_arm: Positive
    warmup_seconds: NonNegative
    arms: _ranged_list(Literal["ceiling", "a3c", "ga3c", "learner"],
                       "a non-empty list of ceiling, a3c, ga3c, learner", 1)
    learner: LearnerBench
    a3c_agents: int | None = Field(ge=1, le=4096)
    arm_overrides: dict[str, Overrides] = None
    log_every_seconds: Positive
    poll_seconds: Positive
    startup_grace_seconds: Positive


class DeviceCheck(Section):
    nets: _ranged_list(Name, "a non-empty list of net names", 1)
    bench_arms: _ranged_list(Literal["ceiling", "a3c", "ga3c"], "a non-empty list of ceiling, a3c, ga3c", 1)
    bench_seconds: Positive
    bench_warmup_seconds: NonNegative
    learner_updates: Count
    learning_seconds: Positive
    learning_arms: dict[str, Overrides]


class Run(Section):
    """The composed config: conf/config.yaml's keys (every run needs them) and the tools' optional ones."""
    seed: Seed
    max_frames: int | None = Field(ge=1)
    stop_score: float | None
    ckpt_path: _string(None, "the path of a checkpoint file") | None
    output_dir: PathText
    agents: int = Field(ge=1, le=4096)
    predictors: int = Field(ge=1, le=64)
    trainers: int = Field(ge=1, le=64)
    t_max: int = Field(ge=1, le=1000)
    prediction_max_batch: Count
    training_min_batch: int = Field(ge=0, description="0 = each rollout alone")
    training_max_batch: Count
    batch_queue_size: Count
    rollout_slots: int = Field(ge=1, le=64)
    torch_threads: int = Field(ge=1, le=1024)
    stall_seconds: float = Field(ge=0, description="0 = never")
    objective: Annotated[Literal["score_mean_100", "episode_length_mean_100", "fps", "fps_run_mean", "pps", "tps",
                                 "samples_per_s", "samples_per_s_run_mean", "frames", "episodes", "updates",
                                 "seconds_to_stop_score", "policy_lag_mean", "wall_seconds"],
                         Field(description="a key of summary.json")]
    learner: Learner
    checkpoint: Checkpoint
    log: Log
    wandb: Wandb
    game: Game
    algo: Algo
    autotune: Autotune
    net: dict            # checked by its class (NETS)
    trainer: dict = None  # checked as Lightning Trainer keywords (Trainer)
    video: Video = None
    seeds: Seeds = None                              # learncurve, suite
    minutes: Positive = None
    learncurve: Learncurve = None
    games: _ranged_list(Name, "a non-empty list of game names", 1) = None   # suite
    suite: Suite = None
    bench: Bench = None
    device_check: DeviceCheck = None


# --- net/: each network class's keywords (ga3c/networks.py) ----------------------------------------------
# Another class (net._target_=...) may take any keywords its constructor has.
Init = Literal["orthogonal", "torch"]
Layers = _ranged_list(Annotated[int, Field(ge=1, le=4096)], "a non-empty list of integers >= 1", 1, 16)


class TargetNode(Section):
    target: Target = Field(alias="_target_")


class ConvNet(TargetNode):
    channels: Layers
    kernels: Layers
    strides: Layers
    hidden: int = Field(ge=1, le=65536)
    init: Init
    value_scale: Positive = None


class MLPNet(TargetNode):
    hidden: Layers
    init: Init
    value_scale: Positive = None


class RecurrentNet(ConvNet):
    core: int = Field(ge=1, le=65536)
    core_input_norm: bool


NETS: dict[str, type[TargetNode]] = {"ga3c.networks.ConvActorCritic": ConvNet,
                                     "ga3c.networks.MLPActorCritic": MLPNet,
                                     "ga3c.networks.RecurrentActorCritic": RecurrentNet}


# --- optimizer/ (the learner.optimizer node) -------------------------------------------------------------
# Typed keywords of the optimizers conf/ names; a class not listed may take any keywords its constructor has.
class OptimizerNode(TargetNode):
    partial: Annotated[Literal[True], Field(alias="_partial_", description="the learner passes the parameters")]


class RMSpropTF(OptimizerNode):
    """The paper's RMSProp (TensorFlow 1's form; ga3c/learner.py): torch RMSprop's keywords without the flags."""
    lr: Positive
    alpha: Fraction = None
    eps: NonNegative = None
    momentum: Fraction = None


class TorchFlags(OptimizerNode):
    foreach: Any = None
    maximize: Any = None
    capturable: Any = None
    differentiable: Any = None


class RMSprop(RMSpropTF, TorchFlags):
    weight_decay: NonNegative = None
    centered: bool = None


class Adam(TorchFlags):
    lr: Positive
    betas: _ranged_list(Fraction, "two numbers in [0, 1]", 2, 2) = None
    eps: NonNegative = None
    weight_decay: NonNegative = None
    amsgrad: bool = None
    fused: bool | None = None   # conf/optimizer/adam.yaml sets it; null = torch decides
    decoupled_weight_decay: bool = None


OPTIMIZERS: dict[str, type[OptimizerNode]] = {"ga3c.learner.RMSpropTF": RMSpropTF, "torch.optim.RMSprop": RMSprop,
                                              "torch.optim.Adam": Adam}


# --- trainer.*: Lightning's Trainer keywords ------------------------------------------------------------
# Any keyword of the installed Trainer (trainer_keywords()); the common ones are typed here, Lightning checks the
# rest when the run builds its Trainer, and a refusal there is reported like any bad input (ga3c/algos/ga3c.py).
# The precisions GA3C runs with; Lightning knows a few more (16-true, transformer-engine) that the predictors'
# bf16 copy and the learner's autocast do not handle.
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "32", "bf16", "16", "64-true", "64")
ONE_PROCESS = "GA3C trains one model in one process"


def _max_time_ok(v) -> bool:
    """Lightning's Timer takes DD:HH:MM:SS or a dict of timedelta fields."""
    if isinstance(v, str):
        parts = v.split(":")
        return len(parts) == 4 and all(p.strip().isdigit() for p in parts) and any(int(p) for p in parts)
    fields = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
    return (isinstance(v, dict) and bool(v) and all(k in fields and _is_number(x) and x >= 0 for k, x in v.items())
            and any(v.values()))


def _one_device(v) -> bool:
    return (v == 1 and _is_int(v)) or v == "1" or (isinstance(v, list) and len(v) == 1 and _is_int(v[0]) and v[0] >= 0)


class Trainer(Section):
    max_time: _checked(_max_time_ok, "DD:HH:MM:SS (e.g. 00:01:30:00), a dict of timedelta fields",
                       ("1:30", "00:00:00:00", "aa:bb:cc:dd")) | None = None
    accelerator: Literal["auto", "cpu", "gpu", "cuda"] = None
    devices: _checked(_one_device, f"1 or a list of one device index, e.g. [0] ({ONE_PROCESS})", (2, [0, 1])) = None
    precision: _checked(lambda v: (isinstance(v, str) or _is_int(v)) and str(v) in PRECISIONS,
                        f"one of {', '.join(PRECISIONS)}", ("bf17",)) = None
    strategy: Annotated[Literal["auto"], Field(description=ONE_PROCESS)] = None
    num_nodes: Annotated[Literal[1], Field(description=ONE_PROCESS)] = None
    max_steps: int = Field(None, ge=-1, description="-1 = no limit")
    min_steps: int | None = Field(None, ge=0)
    min_epochs: int | None = Field(None, ge=0)
    fast_dev_run: _checked(lambda v: isinstance(v, bool) or (_is_int(v) and v >= 0),
                           "true, false or an integer >= 0", (-1,)) = None
    accumulate_grad_batches: int = Field(None, ge=1, le=10_000)
    limit_train_batches: _checked(lambda v: _is_number(v) and v >= 0 and (_is_int(v) or v <= 1),
                                  "a number in [0, 1] or an integer >= 0", (-1, 1.5)) | None = None
    logger: Annotated[Literal[True], Field(description="W&B is set by wandb.mode: wandb.mode=disabled turns it off")]\
        = None
    enable_progress_bar: bool = None
    enable_model_summary: bool = None
    deterministic: Literal[True, False, "warn"] | None = None
    benchmark: bool | None = None
    inference_mode: bool = None
    detect_anomaly: bool = None
    profiler: Literal["simple", "advanced", "pytorch"] | None = None
    barebones: Annotated[Literal[False], Field(description="ga3c's monitor logs through the Trainer")] = None
    enable_autolog_hparams: bool = None
    reload_dataloaders_every_n_epochs: Annotated[Literal[0], Field(
        description="the experience stream is one endless epoch")] = None


# Trainer keywords ga3c sets itself (ga3c/algos/ga3c.py): any value is refused, with the reason.
TRAINER_RESERVED = {
    "max_epochs": "the experience stream is one endless epoch; stop with max_frames, trainer.max_time or "
                  "trainer.max_steps",
    "callbacks": "ga3c installs its own callbacks",
    "default_root_dir": "the run directory is hydra.run.dir",
    "num_sanity_val_steps": "GA3C has no validation loop",
    "log_every_n_steps": "ga3c logs every log.every_seconds",
    "enable_checkpointing": "ga3c always checkpoints (checkpoint.every_minutes, checkpoint.keep)",
    "gradient_clip_val": "use learner.grad_clip (the learner clips and checks the norm itself)",
    "gradient_clip_algorithm": "use learner.grad_clip",
    "plugins": "precision is set by trainer.precision",
}


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

        return frozenset(parameters(pl.Trainer.__init__)) - {"self"}


def parameters(cls) -> set[str]:
    """The keyword names a class's constructor takes."""
    import inspect

    return {p.name for p in inspect.signature(cls).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


# --- reading the schema (messages, and the generated tests) ----------------------------------------------
def fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields under the names the config uses (`_target_`, not `target`)."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def unpack(field: FieldInfo) -> tuple[list, list, bool]:
    """(the types a field accepts, its constraints and markers, whether it takes null), through Optional and
    Annotated."""
    annotation, metadata, nullable = field.annotation, list(field.metadata), False
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else (
        annotation,)
    kinds = []
    for member in members:
        if member is type(None):
            nullable = True
            continue
        if typing.get_origin(member) is Annotated:
            member, *extra = typing.get_args(member)
            for m in extra:
                metadata += m.metadata if isinstance(m, FieldInfo) else [m]
        kinds.append(member)
    return kinds, metadata, nullable


def describe(field: FieldInfo) -> str:
    """What a key allows, in the words of a message: "an integer in [1, 4096]", "true or false or null"."""
    kinds, metadata, nullable = unpack(field)
    bounds = {name: getattr(m, name) for m in metadata for name in ("ge", "le", "gt") if hasattr(m, name)}
    marker = next((m for m in metadata if isinstance(m, Allowed)), None)
    kind = kinds[0] if len(kinds) == 1 else None
    if marker is not None:
        text = marker.text
    elif typing.get_origin(kind) is Literal:
        options = typing.get_args(kind)
        shown = ", ".join(o if isinstance(o, str) else show(o) for o in options)
        text = f"one of {shown}" if len(options) > 1 else show(options[0])
    elif kind is bool:
        text = "true or false"
    elif kind in (int, float):
        noun, fmt = ("an integer", str) if kind is int else ("a number", lambda x: f"{x:g}")
        if "gt" in bounds:
            text = f"{noun} > {fmt(bounds['gt'])}"
        elif "ge" in bounds and "le" in bounds:
            text = f"{noun} in [{fmt(bounds['ge'])}, {fmt(bounds['le'])}]"
        elif "ge" in bounds:
            text = f"{noun} >= {fmt(bounds['ge'])}"
        else:
            text = noun if kind is int else "a finite number"
    else:
        text = "anything" if kind is Any else getattr(kind, "__name__", str(kind))
    note = f" ({field.description})" if field.description else ""
    return text + note + (" or null" if nullable else "")


def show(value) -> str:
    """A value as the user would write it (YAML), cut to one short line."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list):
        text = "[" + ", ".join(show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


ANYTHING = FieldInfo.from_annotation(Any)   # a keyword of a class not listed here: that class checks it


def import_target(target: str):
    """The class a `_target_` names (another net or optimizer than ours): imported only then, it may be heavy.
    Raises ImportError with one line."""
    import importlib

    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as error:  # noqa: BLE001 - any import failure is the same mistake for the user
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ImportError(reason) from None


def node_model(section: str, target) -> type[BaseModel] | None:
    """The model of a node built from a class (net, learner.optimizer) whose `_target_` is `target`."""
    return (NETS if section == "net" else OPTIMIZERS).get(target) if isinstance(target, str) else None


def field_for(key: str, tree: dict | None = None) -> FieldInfo | None:
    """The field of a dotted key (`learner.gamma`, `game.anchors.human`, `trainer.max_steps`), or None when it is
    not a key of ours. `tree`: the composed config, for the `_target_` that net and learner.optimizer's keys
    depend on."""
    tree = tree or {}
    parts = key.split(".")
    section, name = ".".join(parts[:-1]), parts[-1]
    if section in ("net", "learner.optimizer"):
        node = tree.get("net", {}) if section == "net" else tree.get("learner", {}).get("optimizer", {})
        target = node.get("_target_") if isinstance(node, dict) else None
        model = node_model(section, target)
        if model is not None:
            return fields(model).get(name)
        common = fields(OptimizerNode if section == "learner.optimizer" else TargetNode)
        if name in common or name.startswith("_") or not isinstance(target, str) or not re.match(
                TARGET_PATTERN, target):
            return common.get(name)
        try:
            return ANYTHING if name in parameters(import_target(target)) else None
        except ImportError:
            return None
    if section == "trainer":
        if name in fields(Trainer):
            return fields(Trainer)[name]
        return ANYTHING if name in trainer_keywords() and name not in TRAINER_RESERVED else None
    model: Any = Run
    for i, part in enumerate(parts):
        field = fields(model).get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        if i == len(parts) - 1:
            return field
        kinds, _, _ = unpack(field)
        model = kinds[0]
        if typing.get_origin(model) is dict and i == len(parts) - 2:   # game.anchors.human
            return FieldInfo.from_annotation(typing.get_args(model)[1])
    return None


def required_keys() -> tuple[str, ...]:
    """The keys every run needs (a missing one would fail mid-start-up)."""
    def walk(model, prefix):
        for name, field in fields(model).items():
            if field.is_required():
                kind = unpack(field)[0][0]
                if isinstance(kind, type) and issubclass(kind, Section):
                    yield from walk(kind, f"{prefix}{name}.")
                elif f"{prefix}{name}" not in ("learner.optimizer", "net", "trainer"):
                    yield f"{prefix}{name}"
    return (*walk(Run, ""), "net._target_", "learner.optimizer._target_", "learner.optimizer.lr")

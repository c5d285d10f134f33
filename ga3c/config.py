"""Checks of a composed config, before any process starts: bad input gets one line naming the key, the value
given and what is allowed.

The checks themselves are pydantic's, over the models of ga3c/schema.py (a key the schema does not know is an
error too); this module turns the first failure into that line, checks what is between keys (batch bounds, Atari
keys on a non-Atari game, the files a run needs), registers the config's resolvers (${machine:...},
${ale_name:...}) and words Hydra's own errors.

Kept free of torch and Lightning imports: bad input is answered in about a second.
"""
from __future__ import annotations

import difflib
import functools
import os
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from ga3c.schema import (TRAINER_RESERVED, OptimizerNode, Run, Section, TargetNode, Trainer, describe, field_for,
                         fields, import_target, node_model, parameters, show, trainer_keywords, unpack)


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
    """Starting counts for a machine. With a GPU, the paper's 32/2/2 (4 agents a core on bigger machines) and
    batches >= 128: a GPU learner's step costs about as much at 128 samples as at the paper's 32, so the larger
    batch trains more samples a second (docs/benchmarks.md, GPU). Without one, the cores
    are shared by envs, acting and training, and fewer threads batch better: 8 agents a core (16 on 2 cores),
    one predictor per 4 cores, 2 trainers, batches >= 128 (on 2 cores 16/1/2 ran Pong at ~7,900 frames/s
    against ~2,650 with 32/2/2 and a policy lag of 5-11 updates against ~26)."""
    if gpu:
        return dict(agents=max(32, 4 * cores), predictors=2, trainers=2, training_min_batch=128)
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


# --- checking a composed config ------------------------------------------------------------------------
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
        raise ConfigError(f"the config must be a mapping of keys, got {show(tree)}")
    return tree


def unknown_key_message(key: str, override: str | None = None) -> str:
    """What to say about a key that is not in the composed config. `override`: the user's `key=value`, when
    Hydra refused it because the key is not there yet (keys the schema knows are added with a leading +)."""
    section, _, name = key.rpartition(".")
    addable = (section in ("net", "learner.optimizer") or field_for(key) is not None
               or (section == "trainer" and name in TRAINER_RESERVED))
    if override and addable:
        return f"{key} is not in the config: add it with +{override}"
    if section == "trainer":
        close = difflib.get_close_matches(name, sorted(trainer_keywords()), n=1)
        hint = f"; did you mean trainer.{close[0]}?" if close else ""
        return f"{key} is not a keyword of Lightning's Trainer{hint}"
    close = difflib.get_close_matches(key, _schema_keys(), n=1)
    hint = f"; did you mean {close[0]}?" if close else " (every key is declared in ga3c/schema.py)"
    return f"{key} is not a config key{hint}"


@functools.cache
def _schema_keys() -> list[str]:
    """Every dotted key of the Run model (for did-you-mean hints)."""
    def walk(model, prefix):
        for name, field in fields(model).items():
            kind = unpack(field)[0][0]
            if isinstance(kind, type) and issubclass(kind, Section):
                yield from walk(kind, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"
    return list(walk(Run, ""))


def _failure(tree: dict, error: dict, prefix: str = "") -> ConfigError:
    """One line for pydantic's first error: the key (a list's item or a union's branch names its key), the value
    given and what the key allows."""
    loc = [prefix] * bool(prefix) + [str(part) for part in error["loc"]]
    kind = error["type"]
    key = ".".join(loc)   # a missing or unknown key is named whole; a bad value by its key, not by the list
    if kind not in ("missing", "extra_forbidden"):   # item or the union branch that pydantic adds to the path
        key = loc[0]
        for part in loc[1:]:
            if field_for(f"{key}.{part}", tree) is None:
                break
            key = f"{key}.{part}"
    if kind == "missing":
        return ConfigError(f"{key} is missing: every run needs it (conf/config.yaml defines it)")
    if kind == "extra_forbidden":
        section = key.rpartition(".")[0]
        if section in ("net", "learner.optimizer"):
            target = _get(tree, f"{section}._target_")
            known = sorted(k for k in fields(node_model(section, target)) if not k.startswith("_"))
            return ConfigError(f"{key} is not a keyword of {target} (its keys: {', '.join(known)})")
        return ConfigError(unknown_key_message(key))
    field = field_for(key, tree)
    value = _get(tree, key, error.get("input"))
    allowed = describe(field) if field is not None else "valid"
    hint = ""
    if isinstance(value, float) and value.is_integer() and "integer" in allowed:
        hint = f" (an integer: write {int(value):_})"
    return ConfigError(f"{key} must be {allowed}, got {show(value)}{hint}")


def _check(model: type[BaseModel], tree: dict, node: dict, prefix: str = "") -> None:
    """pydantic's check of `node` against `model`; its first error (a missing key first) as a ConfigError."""
    try:
        model.model_validate(node)
    except ValidationError as error:
        errors = sorted(error.errors(), key=lambda e: e["type"] != "missing")
        raise _failure(tree, errors[0], prefix) from None


def _check_class_node(tree: dict, section: str) -> None:
    """net and learner.optimizer: a class and its keywords. The classes ga3c names have a model in ga3c/schema.py;
    another class may take the keywords its constructor has (checked by that class when it is built)."""
    node = _get(tree, section)
    if not isinstance(node, dict):
        raise ConfigError(f"{section} must be a group of keys, got {show(node)}")
    target = node.get("_target_")
    model = node_model(section, target)
    if model is not None:
        return _check(model, tree, node, section)
    common = OptimizerNode if section == "learner.optimizer" else TargetNode
    _check(common, tree, {k: v for k, v in node.items() if k in fields(common)}, section)
    try:
        accepted = parameters(import_target(target))
    except ImportError as error:
        raise ConfigError(f"{section}._target_ {target!r} cannot be imported: {error}") from None
    for name in node:
        if name not in fields(common) and (name.startswith("_") or name not in accepted):
            raise ConfigError(f"{section}.{name} is not a keyword of {target}")


def _check_trainer(tree: dict) -> None:
    node = tree.get("trainer")
    if node is None:
        return
    if not isinstance(node, dict):
        raise ConfigError(f"trainer must be a group of keys, got {show(node)}")
    for name in node:
        if name in TRAINER_RESERVED:
            raise ConfigError(f"trainer.{name} cannot be set: {TRAINER_RESERVED[name]}")
        if field_for(f"trainer.{name}") is None:
            raise ConfigError(unknown_key_message(f"trainer.{name}"))
    _check(Trainer, tree, {k: v for k, v in node.items() if k in fields(Trainer)}, "trainer")


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
                              f"got {show(game['frame_skip'])}")
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
    """Check every key of a composed config (train.py's, or learncurve's, suite's and bench's, which include it)
    against ga3c/schema.py: its type, range and format, that the schema knows it, and the constraints between keys.
    Raises ConfigError with one line naming the key, the value given and what is allowed. Starts nothing, creates
    nothing."""
    tree = {k: v for k, v in _resolve(cfg).items() if k != "hydra"}   # Hydra's own node, when composed with it
    for key in ("net._target_", "learner.optimizer._target_"):  # first: the other keys of the node depend on it
        value = _get(tree, key, _MISSING)
        if value is _MISSING:
            raise ConfigError(f"{key} is missing: every run needs it (conf/config.yaml defines it)")
        _check(TargetNode, tree, {"_target_": value}, key.rpartition(".")[0])
    _check(Run, tree, tree)
    _check_class_node(tree, "net")
    _check_class_node(tree, "learner.optimizer")
    _check_trainer(tree)
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

"""Every key is checked before anything starts, with cases generated from the config itself: for every leaf
key of every composition (each game and net, learncurve's, bench's, the auto-tuners'), a value of the wrong type
and, where its schema has a range or format, values outside it. A key added to conf/ is covered without anyone
remembering to: without a schema entry it fails validation; with one, it gets its cases here."""
from __future__ import annotations

import copy
import inspect
import math
import os
import subprocess
import typing
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from ga3c.config import ConfigError, has_cuda_gpu, validate
from ga3c import schema
from ga3c.schema import (PRECISIONS, Allowed, Trainer, field_for, fields, import_target,
                         parameters, required_keys, trainer_keywords, unpack)

from helpers import CONF, GAMES, NETS, REPO, compose_config, leaked_shm_segments, processes_with, train_command


def compose_named(name: str, *overrides: str):
    """conf/learncurve.yaml or conf/bench.yaml, composed like their entry points do."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=name, overrides=[*overrides, "output_dir=/tmp/ga3c-unused"])


def compositions() -> dict[str, dict]:
    """Every kind of composed config a user can get, as resolved plain values."""
    cfgs = {f"game={g} net={n}": compose_config(f"game={g}", f"net={n}") for g in GAMES for n in NETS}
    cfgs |= {f"autotune={a}": compose_config(f"autotune={a}") for a in ("on", "ga3c")}
    cfgs |= {"learncurve": compose_named("learncurve"), "bench": compose_named("bench"), "suite": compose_named("suite")}
    return {name: OmegaConf.to_container(cfg, resolve=True) for name, cfg in cfgs.items()}


COMPOSITIONS = compositions()


def leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) of every leaf; a group of keys is walked into, an empty one is a leaf."""
    for name, value in tree.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def set_key(tree: dict, key: str, value) -> dict:
    tree = copy.deepcopy(tree)
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        node = node[part]
    node[last] = value
    return tree


def wrong_types(value) -> list:
    """Values of another type than the one the config holds (a dict is wrong for every leaf)."""
    by_type = {bool: ["maybe", 2], int: ["abc"], float: ["abc"], str: [[1, 2]], list: ["abc"], dict: ["abc"]}
    return [{"x": 1}] + (by_type[type(value)] if value is not None else [])


def out_of_range(field) -> list:
    """Values of the right type that the schema's field still refuses, read from its constraints (ge, le, gt,
    lengths, options) and its Allowed marker (bad formats)."""
    kinds, metadata, _ = unpack(field)
    bad = [value for m in metadata if isinstance(m, Allowed) for value in m.invalid]
    bounds = {name: getattr(m, name) for m in metadata for name in ("ge", "le", "gt", "min_length") if hasattr(m, name)}
    kind = kinds[0] if len(kinds) == 1 else None
    if typing.get_origin(kind) is typing.Literal and all(isinstance(o, str) for o in typing.get_args(kind)):
        bad.append("no-such-option")
    elif kind in (int, float):
        if "gt" in bounds:
            bad += [bounds["gt"], bounds["gt"] - 1]
        bad += [bounds["ge"] - 1] if "ge" in bounds else []
        bad += [bounds["le"] + 1] if "le" in bounds else []
        bad += [math.inf] if kind is float and not bounds else []
    elif typing.get_origin(kind) is list:
        from pydantic.fields import FieldInfo

        item_bad = out_of_range(FieldInfo.from_annotation(typing.get_args(kind)[0]))
        bad += [[item_bad[0]] * max(bounds.get("min_length", 0), 1)] if item_bad else []
        bad += [[]] if bounds.get("min_length", 0) > 0 else []
    return bad


def generated_cases() -> list[tuple]:
    """(composition, key, bad value, why) for every leaf key, each key and value type once."""
    cases, seen = [], set()
    for name, tree in COMPOSITIONS.items():
        for key, value in leaves(tree):
            if (key, type(value)) in seen:
                continue
            seen.add((key, type(value)))
            cases += [(name, key, bad, "wrong type") for bad in wrong_types(value)]
            field = field_for(key, tree)
            if field is not None:
                cases += [(name, key, bad, "out of range") for bad in out_of_range(field)]
    return cases


CASES = generated_cases()


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_every_composition_is_valid_as_it_comes(name):
    validate(COMPOSITIONS[name])


def test_every_leaf_key_has_a_schema_entry():
    for name, tree in COMPOSITIONS.items():
        unknown = [key for key, _ in leaves(tree) if field_for(key, tree) is None]
        assert not unknown, f"{name}: keys without a field in ga3c/schema.py: {unknown}"


def test_cases_cover_every_key():
    keys = {key for tree in COMPOSITIONS.values() for key, _ in leaves(tree)}
    assert keys == {key for _, key, _, _ in CASES}
    assert len(keys) > 100, len(keys)
    assert sum(why == "out of range" for *_, why in CASES) > 150   # the constraints are read, not skipped


@pytest.mark.parametrize("name, key, bad, why", CASES, ids=[f"{k}={v!r}" for _, k, v, _ in CASES])
def test_a_bad_value_of_any_key_gets_one_line_naming_it(name, key, bad, why):
    with pytest.raises(ConfigError) as raised:
        validate(set_key(COMPOSITIONS[name], key, bad))
    message = str(raised.value)
    assert key in message, f"{why}: {message!r} does not name {key}"
    assert "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize("key", required_keys())
def test_a_missing_key_is_named(key):
    tree = copy.deepcopy(COMPOSITIONS["game=pong net=small"])
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        node = node[part]
    del node[last]
    with pytest.raises(ConfigError, match=f"{key} is missing"):
        validate(tree)


def test_messages_name_the_key_the_value_and_what_is_allowed():
    def message(*overrides):
        with pytest.raises(ConfigError) as raised:
            validate(compose_config(*overrides))
        return str(raised.value)

    assert message("agents=abc") == "agents must be an integer in [1, 4096], got 'abc'"
    assert message("learner.gamma=1.5") == "learner.gamma must be a number in [0, 1], got 1.5"
    assert message("max_frames=2e7") == "max_frames must be an integer >= 1 or null, got 20000000.0 (an integer: " \
                                        "write 20_000_000)"
    assert message("log.progress=maybe") == "log.progress must be true or false, got 'maybe'"
    assert message("+learner.gama=0.9") == "learner.gama is not a config key; did you mean learner.gamma?"
    assert "one of score_mean_100" in message("objective=score")


@pytest.mark.parametrize("overrides", [
    ["learner.gamma=0"],                      # the probe game's: each reward belongs to its own step
    ["game=cue"], ["experiment=paper"], ["algo=a3c"], ["algo=ceiling"], ["autotune=on", "agents=4"],
    ["trainer.max_time=00:00:01:00"], ["trainer.max_time={minutes:5}"], ["trainer.precision=16"],
    ["trainer.precision=bf16-mixed"], ["trainer.devices=[0]"], ["+trainer.max_steps=100"],
    ["+trainer.deterministic=warn"], ["game=cartpole", "+learner.optimizer.weight_decay=0.01"], ["wandb.tags=[a,b]"],
    ["game=cartpole", "game.id=Acrobot-v1"], ["game=cartpole", "net._target_=tests.fault_nets.RaisingNet", "~net.init",
                                              "+net.after=300"],
])
def test_good_values_pass(overrides):
    validate(compose_config(*overrides))


@pytest.mark.parametrize("overrides, words", [
    (["+nosuchkey=1"], ["nosuchkey is not a config key"]),
    (["+game.nosuch=1"], ["game.nosuch is not a config key"]),
    (["+net.nosuch=1"], ["net.nosuch is not a keyword of ga3c.networks.ConvActorCritic", "channels"]),
    (["optimizer=rmsprop_tf", "+learner.optimizer.nosuch=1"],
     ["learner.optimizer.nosuch is not a keyword of ga3c.learner.RMSpropTF", "alpha"]),
    (["optimizer=rmsprop_tf", "+learner.optimizer.weight_decay=0"],
     ["learner.optimizer.weight_decay is not a keyword of ga3c.learner.RMSpropTF"]),
    (["+trainer.max_tim=1"], ["trainer.max_tim is not a keyword of Lightning's Trainer", "trainer.max_time"]),
    (["+trainer.max_epochs=3"], ["trainer.max_epochs cannot be set", "max_frames"]),
    (["+trainer.gradient_clip_val=1"], ["trainer.gradient_clip_val cannot be set", "learner.grad_clip"]),
    (["trainer.logger=false"], ["trainer.logger must be true", "wandb.mode=disabled"]),
    (["trainer.max_time=abc"], ["trainer.max_time", "DD:HH:MM:SS", "'abc'"]),
    (["trainer.max_time=00:00:00:00"], ["trainer.max_time"]),
    (["trainer.max_time={minute:5}"], ["trainer.max_time"]),
    (["trainer.devices=2"], ["trainer.devices", "one model in one process"]),
    (["trainer.devices=two"], ["trainer.devices", "'two'"]),
    (["trainer.accelerator=tpu"], ["trainer.accelerator", "cpu"]),
    (["trainer.precision=bf17"], ["trainer.precision", "bf16-mixed"]),
    (["+trainer.strategy=ddp"], ["trainer.strategy", "one model in one process"]),
    (["game=cartpole", "net._target_=tests.fault_nets.RaisingNet", "+net.after=300"],
     ["net.init is not a keyword of tests.fault_nets.RaisingNet"]),
    (["net._target_=nosuch.Net"], ["net._target_ 'nosuch.Net' cannot be imported", "nosuch"]),
    (["game=cartpole", "game.frame_skip=4"], ["game.frame_skip must be 1"]),
    (["game=cartpole", "+game.frame_stack=4"], ["game.frame_stack applies to Atari games only"]),
    (["net.channels=[16]"], ["net.channels, net.kernels and net.strides"]),
    (["training_min_batch=300", "training_max_batch=100"], ["training_min_batch", "training_max_batch"]),
    (["agents=${nosuch}"], ["agents cannot be resolved"]),
    (["~agents"], ["agents is missing"]),
    (["ckpt_path=/nonexistent/last.ckpt"], ["ckpt_path", "does not exist"]),
    (["output_dir=OUT"], ["output_dir", "'/etc/hostname' is not a directory"]),
    (["wandb.project=a/b"], ["wandb.project", "'a/b'"]),
    (["wandb.tags=solo"], ["wandb.tags", "list"]),
])
def test_bad_values_and_unknown_keys_are_named(overrides, words):
    with pytest.raises(ConfigError) as raised:
        if overrides == ["output_dir=OUT"]:  # compose_config sets output_dir itself
            validate(compose_config(output_dir=Path("/etc/hostname/run")))
        validate(compose_config(*overrides))
    for word in words:
        assert word in str(raised.value), f"{word!r} not in {str(raised.value)!r}"


@pytest.mark.skipif(has_cuda_gpu(), reason="this machine has a GPU")
def test_gpu_accelerator_without_a_gpu():
    with pytest.raises(ConfigError, match="no NVIDIA GPU"):
        validate(compose_config("trainer.accelerator=gpu"))


def test_learncurve_and_bench_keys_are_checked_too():
    validate(compose_named("learncurve", "learncurve.arms=[ga3c,a3c]", "seeds=2", "minutes=0.5"))
    validate(compose_named("bench", "bench.arms=[ga3c]", "+bench.arm_overrides.ga3c=['agents=4']"))
    for name, override, key in (("learncurve", "seeds=0", "seeds"), ("learncurve", "minutes=-1", "minutes"),
                                ("learncurve", "learncurve.arms=[]", "learncurve.arms"),
                                ("bench", "bench.arms=[gpu]", "bench.arms"),
                                ("bench", "bench.seconds_per_arm=0", "bench.seconds_per_arm"),
                                ("suite", "suite.random_episodes=0", "suite.random_episodes"),
                                ("suite", "games=[]", "games")):
        with pytest.raises(ConfigError, match=key):
            validate(compose_named(name, override))


def test_the_trainer_keywords_are_lightnings():
    """trainer_keywords() reads the installed Trainer's source instead of importing it; it must agree with the
    imported class exactly."""
    import pytorch_lightning as pl

    params = {p for p in inspect.signature(pl.Trainer.__init__).parameters if p != "self"}
    assert set(fields(Trainer)) <= params and trainer_keywords() == params
    annotation = str(inspect.signature(pl.Trainer.__init__).parameters["precision"].annotation)
    assert all(f"'{p}'" in annotation for p in PRECISIONS if p != "auto"), annotation


def test_the_typed_keywords_are_the_classes_own():
    """NETS and OPTIMIZERS spare validation the import of torch; their keys must be real keywords."""
    for target, model in {**schema.NETS, **schema.OPTIMIZERS}.items():
        missing = {k for k in fields(model) if not k.startswith("_")} - parameters(import_target(target))
        assert not missing, f"{target} has no keyword(s) {sorted(missing)}"


# --- through train.py: exit code 2, one line, nothing started ---------------------------------------------
def corrupt_checkpoint(tmp_path: Path) -> str:
    path = tmp_path / "corrupt.ckpt"
    path.write_bytes(b"PK\x03\x04 this is not a checkpoint")
    return str(path)


# One of each kind of bad input that only a real process shows (the values of every key are checked in-process
# above): each was once a traceback, a leaked segment or a multi-line Hydra report. game=cartpole unless given.
BAD_COMMAND_LINES = [
    (["agents=abc"], "agents must be an integer"),
    (["trainer.max_time=abc"], "trainer.max_time must be"),
    (["training_min_batch=300", "training_max_batch=100"], "training_min_batch (300) must not exceed training_max_batch"),
    (["+game.nosuch=3"], "game.nosuch is not a config key"),
    (["nosuchkey=1"], "nosuchkey is not a config key"),
    (["trainer.max_steps=5"], "trainer.max_steps is not in the config: add it with +trainer.max_steps=5"),
    (["agents=[1"], "cannot read the override 'agents=[1'"),
    (["game=nosuch"], "there is no option 'game/nosuch'"),
    (["algo=a4c"], "there is no option 'algo/a4c'"),
    (["game=atari"], "game.id must be given"),
    (["game.id=NoSuchGame-v9"], "game.id"),
    (["net=small"], "net="),                                   # a conv net on CartPole's vectors
    (["ckpt_path=/nonexistent/last.ckpt"], "ckpt_path '/nonexistent/last.ckpt' does not exist"),
    (["ckpt_path=CORRUPT"], "ckpt_path"),
    (["+trainer.val_check_interval=abc"], "trainer: Lightning refused the settings"),  # after start-up began
    (["hydra.run.dir=/proc/ga3c-test/run"], "output directory '/proc/ga3c-test"),
    (["hydra.run.dir=/etc/hostname/run"], "output directory"),
]


@pytest.mark.parametrize("overrides, start", BAD_COMMAND_LINES, ids=[" ".join(o) for o, _ in BAD_COMMAND_LINES])
def test_train_py_answers_bad_input_in_one_line_with_exit_code_2(tmp_path, overrides, start):
    """The bad-input contract: exit code 2, one `ga3c: error:` line naming the problem, no traceback, and no
    process, shared-memory segment or unfinished W&B run left."""
    run_dir = tmp_path / "run"
    overrides = [o.replace("CORRUPT", corrupt_checkpoint(tmp_path)) for o in overrides]
    game = [] if any(o.startswith("game=") for o in overrides) else ["game=cartpole"]
    command = train_command(run_dir, "wandb.mode=offline", *game, *overrides)
    env = dict(os.environ, GA3C_TEST_MARKER=str(run_dir))
    shm_before = set(os.listdir("/dev/shm"))
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ga3c: error: ") and start in lines[0], result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert not processes_with(str(run_dir))
    assert not leaked_shm_segments(shm_before)
    from wandb_records import unfinished_runs

    assert not unfinished_runs(run_dir)


# --- a clean console ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_console_shows_only_our_lines(tmp_path):
    """No library tips (Lightning's litlogger advert), deprecation warnings (Lightning's pytree use) or W&B
    notices about settings we pass ('anonymous'): every line is ga3c's progress line or a ga3c log line."""
    import re

    from helpers import run_train
    from wandb_records import unfinished_runs

    result = run_train(tmp_path, "game=cartpole", "max_frames=5000", "log.progress=true", "wandb.mode=offline")
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    ours = re.compile(r"^(\[ga3c\] |\[[\d-]+ [\d:,]+\]\[ga3c[.\]])")
    assert lines and all(ours.match(line) for line in lines), "\n".join(l for l in lines if not ours.match(l))
    assert any("W&B offline run: `wandb sync" in line for line in lines), lines
    assert any("learner on cpu" in line or "learner on cuda" in line for line in lines), lines
    assert not unfinished_runs(tmp_path)

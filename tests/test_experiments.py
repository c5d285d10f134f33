"""The paper's studies: every conf/experiment file and every W&B sweep file composes into valid train.py
configs, their overrides name real keys, and a multirun through the submitit launcher works locally."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from omegaconf import OmegaConf

from ga3c.config import validate
from helpers import CONF, REPO, assert_no_leftovers, read_summary

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
SINGLE_RUN = ("paper",)   # presets for one run (tests/test_config.py checks them), not multirun studies
SWEEPS = sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml"))
STUDIES = ("rq1_ga3c_vs_a3c", "rq2_counts_grid", "rq3_autotune", "rq4_training_batch", "rq5_network_size",
           "hparam_search")
GROUP_DIRS = {p.name for p in CONF.iterdir() if p.is_dir()} - {"hydra"}
_MISSING = object()


def compose_job(overrides: list[str]):
    """The config one job gets, with Hydra's own config set so ${hydra:...} interpolations resolve."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "output_dir=/tmp/ga3c-unused"],
                      return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def missing_options(overrides: list[str]) -> list[str]:
    """Group options named by the overrides that are not in conf/ (yet): e.g. algo=a3c before it exists."""
    missing = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in GROUP_DIRS and value not in ("null", "None") and not (CONF / key / f"{value}.yaml").is_file():
            missing.append(f"{key}={value}")
    return missing


def check_job(cfg, study: str) -> None:
    """A job config a user would run: valid values, everything resolves, the study's W&B group and tags."""
    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    container = OmegaConf.to_container(job, resolve=True)
    assert container["wandb"]["group"] == study, f"{study}: wandb.group is {container['wandb']['group']!r}"
    tags = container["wandb"]["tags"]
    for kind, value in (("game", cfg.game.name), ("net", HydraConfig.get().runtime.choices["net"]),
                        ("algo", cfg.algo.name), ("autotune", cfg.autotune.name)):
        assert f"{kind}:{value}" in tags, f"{study}: tag {kind}:{value} missing from {tags}"
    validate(job)


def sweep_values(key: str, text: str) -> list:
    """The values one sweeper parameter takes (interval sweeps: their two ends)."""
    override = OverridesParser.create().parse_overrides([f"{key}={text}"])[0]
    value = override.value()
    if isinstance(value, ChoiceSweep):
        return list(value.list)
    if isinstance(value, IntervalSweep):
        return [value.start, value.end]
    if isinstance(value, RangeSweep):
        return list(override.sweep_iterator())
    return [value]


def names_real_key(cfg, key: str) -> bool:
    return key in GROUP_DIRS or OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING


def test_every_study_has_an_experiment_and_a_sweep():
    for study in STUDIES:
        assert study in EXPERIMENTS, f"conf/experiment/{study}.yaml is missing"
        assert study in SWEEPS, f"sweeps/{study}.yaml is missing"
    for path in (CONF / "experiment").glob("*.yaml"):
        assert path.read_text().startswith("# @package _global_"), f"{path.name} needs '# @package _global_'"


@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e not in SINGLE_RUN])
def test_experiment_composes_and_names_real_keys(name):
    cfg = compose_job([f"experiment={name}"])
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=False)
    assert params, f"{name}: hydra.sweeper.params is empty: nothing to sweep"
    unknown = [key for key in params if not names_real_key(cfg, key)]
    assert not unknown, f"{name}: sweeper params name no config key: {unknown}"
    if name == "hparam_search":
        assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
        assert cfg.hydra.sweeper.direction == "maximize" and cfg.objective == "score_mean_100"
    check_job(cfg, cfg.wandb.group)
    assert cfg.wandb.group == name, f"{name}: its W&B group should be its name"
    # Every value of every parameter composes into a valid job (the full grid would repeat these checks).
    for key, text in params.items():
        for value in sweep_values(key, str(text)):
            overrides = [f"experiment={name}", f"{key}={value}"]
            assert not missing_options(overrides), f"{name}: {key}={value} names an option not in conf/"
            check_job(compose_job(overrides), name)


def load_sweep(name: str) -> dict:
    from wandb.sdk.launch.sweeps.utils import load_sweep_config

    return load_sweep_config(str(REPO / "sweeps" / f"{name}.yaml"))


def sweep_assignments(config: dict) -> list[dict]:
    """Parameter sets that together use every value of every parameter (each varied alone, the others at
    their first value): a grid's full product only repeats these checks."""
    params = config["parameters"]
    fixed = {k: p["value"] for k, p in params.items() if "value" in p}
    varied = {}
    for key, p in params.items():
        if "values" in p:
            varied[key] = list(p["values"])
        elif "distribution" in p:
            varied[key] = [p["min"], p["max"]]
        elif "value" not in p:
            raise AssertionError(f"parameter {key} has no value, values or distribution: {p}")
    first = {k: v[0] for k, v in varied.items()}
    return [{**fixed, **first, k: v} for k, values in varied.items() for v in values]


def expand_command(config: dict, assignment: dict) -> list[str]:
    """The argv W&B's agent runs for one parameter set (the same macro expansion as wandb_agent.py)."""
    from wandb.sdk.launch.sweeps import utils

    command = utils.create_sweep_command(list(config["command"]))
    sweep_vars = utils.create_sweep_command_args({"args": {k: {"value": v} for k, v in assignment.items()}})
    sweep_vars.update(interpreter=["python"], program=[config["program"]], env=["/usr/bin/env"])
    argv = []
    for chunk in map(str, command):
        argv += sweep_vars.get(chunk[2:-1]) or [] if chunk.startswith("${") and chunk.endswith("}") else [chunk]
    return argv


@pytest.mark.parametrize("name", SWEEPS)
def test_wandb_sweep_parses_and_expands_to_valid_train_commands(name, monkeypatch):
    monkeypatch.setenv("WANDB_RUN_ID", "sweeprun1")
    config = load_sweep(name)
    assert config["program"] == "train.py" and (REPO / "train.py").is_file()
    assert config["method"] in ("grid", "random", "bayes")
    assert "${args_no_hyphens}" in config["command"], "Hydra takes key=value overrides, not --flags"
    if config["method"] != "grid" or "metric" in config:
        assert config["metric"]["goal"] in ("maximize", "minimize")
        assert f'"{config["metric"]["name"]}"' in (REPO / "ga3c" / "monitor.py").read_text(), \
            f"metric {config['metric']['name']!r} is not a key the Monitor logs"
    experiment = config["parameters"]["experiment"]["value"]
    assert experiment in EXPERIMENTS, f"sweep names experiment={experiment}, not in conf/experiment/"
    checked = 0
    for assignment in sweep_assignments(config):
        argv = expand_command(config, assignment)
        assert argv[:3] == ["/usr/bin/env", "python", "train.py"], argv
        overrides = argv[3:]
        assert all("=" in o and not o.startswith("-") for o in overrides), overrides
        assert not missing_options(overrides), f"{name}: {overrides} names an option not in conf/"
        cfg = compose_job(overrides)
        for key in assignment:
            assert names_real_key(cfg, key), f"{name}: parameter {key} names no config key"
        assert cfg.wandb.mode == "online" and cfg.wandb.id == "sweeprun1"
        check_job(cfg, experiment)
        checked += 1
    assert checked == len(sweep_assignments(config))


def test_submitit_launcher_configs_compose():
    for launcher, target in (("ga3c_local", "LocalLauncher"), ("ga3c_slurm", "SlurmLauncher")):
        cfg = compose_job(["experiment=rq4_training_batch", f"hydra/launcher={launcher}"])
        assert cfg.hydra.launcher._target_.endswith(target)
        assert cfg.hydra.launcher.timeout_min >= 60


@pytest.mark.slow
def test_multirun_with_submitit_local_launcher_runs_each_job_in_its_own_process(tmp_path):
    """The documented process-isolated launcher, for real: two CartPole jobs, one at a time."""
    sweep_dir = tmp_path / "multirun"
    env = dict(os.environ, GA3C_TEST_MARKER=str(sweep_dir))
    command = [sys.executable, "train.py", "-m", "experiment=cartpole_demo", "hydra/launcher=ga3c_local",
               "hydra.sweeper.max_batch_size=1", f"hydra.sweep.dir={sweep_dir}", "max_frames=6000",
               "log.every_seconds=1", "log.progress=false", "wandb.mode=offline"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    runs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in runs] == ["0", "1"]
    batches, job_logs = [], sorted((sweep_dir / ".submitit").glob("*/*_log.out"))
    assert len(job_logs) == 2, f"expected one submitit log per job, got {job_logs}"
    wandb_ids = set()
    for run in runs:
        summary = read_summary(run)
        assert summary["status"] == "finished" and summary["frames"] >= 6000
        batches.append((run / ".hydra" / "overrides.yaml").read_text())
        offline = list((run / "wandb").glob("offline-run-*"))
        assert len(offline) == 1, f"{run}: one W&B run per job, got {offline}"
        wandb_ids.add(offline[0].name.rsplit("-", 1)[1])
    assert len(wandb_ids) == 2, "each job must have its own W&B run"
    assert "training_min_batch=16" in batches[0] and "training_min_batch=64" in batches[1]
    assert_no_leftovers(str(sweep_dir))


@pytest.mark.slow
def test_optuna_search_maximises_the_objective_train_py_returns(tmp_path):
    """Two Optuna trials on CartPole: the best value Optuna reports is the best trial's summary[objective]."""
    sweep_dir = tmp_path / "optuna"
    env = dict(os.environ, GA3C_TEST_MARKER=str(sweep_dir))
    command = [sys.executable, "train.py", "-m", "experiment=hparam_search", "game=cartpole", "max_frames=5000",
               "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep_dir}", "wandb.mode=disabled",
               "log.every_seconds=1", "log.progress=false"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    results = OmegaConf.load(sweep_dir / "optimization_results.yaml")
    trials = {run.name: read_summary(run) for run in sweep_dir.iterdir() if run.is_dir() and run.name.isdigit()}
    assert len(trials) == 2
    scores = [s["score_mean_100"] for s in trials.values()]
    assert results.best_value == pytest.approx(max(scores))
    best = next(name for name, s in trials.items() if s["score_mean_100"] == max(scores))
    chosen = (sweep_dir / best / ".hydra" / "overrides.yaml").read_text()
    for key, value in results.best_params.items():
        assert f"{key}={value}" in chosen
    assert_no_leftovers(str(sweep_dir))


def test_an_option_missing_from_conf_is_found():
    """The experiment and sweep checks above fail on a group option that is not in conf/ (a typo like pongg)."""
    assert missing_options(["experiment=paper", "game=pongg", "net=large", "+algo=a3c"]) == ["game=pongg"]

"""The device check: one table of what a machine does with the project's defaults, sized to fit the 15 minutes
a lent GPU machine gives (about 8 minutes on one GPU and 16 cores).

    bash ga3c/tools/device_check.sh                       # on the lent machine: installs what its image lacks
    python -m ga3c.tools.device_check                     # where the dependencies are installed
    python -m ga3c.tools.device_check game=cartpole device_check.bench_seconds=2 ...   # CPU mode (the test)

Steps, each its own process, one after another: per net in device_check.nets a throughput bench
(`ga3c.tools.bench`: env-only ceiling for the first net, CPU A3C, GA3C at the machine's counts, then the learner
micro-benchmark with op and sync counts), then one short learning run per device_check.learning_arms (the
defaults beside sample reuse: where an update costs little, several passes over each batch may learn more per
minute). Writes device_check.md (the table), device_check.json and manifest.json; each step's own files stay
in its subdirectory.
"""
from __future__ import annotations

import logging
import math
import shlex
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from ga3c.tools import REPO
from ga3c.tools.bench import fmt, machine_description
from ga3c.tools.learncurve import run_to_end
from ga3c.tools.runs import read_json

log = logging.getLogger(__name__)


def user_overrides(for_bench: bool) -> list[str]:
    """The command line's overrides that configure the steps (game=, agents=, ...), not the check's own; a
    bench step also takes bench.learner.* (sizes of the micro-benchmark), a training run no bench.* key."""
    from hydra.core.hydra_config import HydraConfig

    own = ("device_check.", "hydra.", "output_dir", "bench.arms", "bench.seconds_per_arm", "bench.warmup_seconds",
           "bench.learner.updates") if for_bench else ("device_check.", "hydra.", "output_dir", "bench.")
    return [o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith(own)]


def max_time(seconds: float) -> str:
    seconds = int(math.ceil(seconds))
    return f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def steps(cfg: DictConfig, bench_user: list[str], train_user: list[str],
          out: Path) -> list[tuple[str, list[str], Path]]:
    """(name, command, output directory) of every step, in order."""
    check, python = cfg.device_check, sys.executable
    planned = []
    for i, net in enumerate(check.nets):
        arms = [a for a in check.bench_arms if i == 0 or a != "ceiling"] + ["learner"]
        run_dir = out / f"bench-{net}"
        planned.append((f"bench-{net}", [
            python, "-m", "ga3c.tools.bench", *bench_user, f"net={net}", f"bench.arms=[{','.join(arms)}]",
            f"bench.seconds_per_arm={check.bench_seconds}", f"bench.warmup_seconds={check.bench_warmup_seconds}",
            f"bench.learner.updates={check.learner_updates}", f"wandb.mode={cfg.wandb.mode}",
            f"hydra.run.dir={run_dir}"], run_dir))
    for arm, overrides in check.learning_arms.items():
        run_dir = out / f"learn-{arm}"
        planned.append((f"learn-{arm}", [
            python, str(REPO / "train.py"), *train_user, *overrides, "max_frames=null",
            f"trainer.max_time={max_time(float(check.learning_seconds))}", f"wandb.mode={cfg.wandb.mode}",
            f"wandb.name=device-check-{arm}", f"hydra.run.dir={run_dir}"], run_dir))
    return planned


def collect(planned: list[tuple[str, list[str], Path]], codes: dict[str, int], seconds: dict[str, float]) -> dict:
    """Every step's figures, from the files it wrote."""
    report = {}
    for name, command, run_dir in planned:
        entry = dict(command=shlex.join(["python", *command[1:]]).replace(str(REPO) + "/", ""),
                     returncode=codes.get(name), seconds=seconds.get(name), run_dir=run_dir.name)
        if name.startswith("bench-"):
            bench = read_json(run_dir / "bench.json") or {}
            entry.update(arms=bench.get("arms", {}), ratios=bench.get("ratios", {}), learner=bench.get("learner"),
                         machine=(bench.get("meta") or {}).get("machine"))
        else:
            summary = read_json(run_dir / "summary.json") or {}
            entry.update(summary={k: summary.get(k) for k in (
                "status", "frames", "updates", "wall_seconds", "fps_run_mean", "samples_per_s_run_mean",
                "score_mean_100", "score_best_100", "agents", "predictors", "trainers", "training_batch_mean")})
        report[name] = entry
    return report


def markdown(report: dict, meta: dict) -> str:
    lines = [f"# Device check: {meta['game']}", "", f"- command: `{meta['command']}`", f"- machine: {meta['machine']}",
             f"- date {meta['date']}; every step its own process, one after another", "",
             "| step | arm | N_A/N_P/N_T | env frames/s | training samples/s | GPU util | learner busy | vs ceiling |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    ceiling = None
    for name, entry in report.items():
        for arm, m in (entry.get("arms") or {}).items():
            if arm == "ceiling":
                ceiling = m.get("fps")
            share = m.get("fps") / ceiling if ceiling and m.get("fps") else None
            gpu = m.get("gpu_util")
            busy = m.get("learner_busy_share") if arm == "ga3c" else None   # the other arms have no learner thread
            lines.append(f"| {name} | {m.get('label', arm)} | {m.get('agents')}/{m.get('predictors')}/"
                         f"{m.get('trainers')} | {fmt(m.get('fps'))} | {fmt(m.get('samples_per_s'))} | "
                         f"{'n/a' if gpu is None else f'{100 * gpu:.0f} %'} | "
                         f"{'n/a' if busy is None else f'{100 * busy:.0f} %'} | {fmt(share, 2)} |")
    lines += ["", "| step | training batch | ms/update | ops/update | syncs/update | prediction batch | ms | "
              "syncs/batch |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, entry in report.items():
        learner = entry.get("learner") or {}
        training = list((learner.get("training") or {}).items())
        prediction = list((learner.get("prediction") or {}).items())
        for i in range(max(len(training), len(prediction))):
            t = training[i] if i < len(training) else (None, {})
            p = prediction[i] if i < len(prediction) else (None, {})
            lines.append(f"| {name} | {t[0] or ''} | {fmt(t[1].get('ms'), 2)} | {fmt(t[1].get('ops'))} | "
                         f"{fmt(t[1].get('syncs'), 1)} | {p[0] or ''} | {fmt(p[1].get('ms'), 2)} | "
                         f"{fmt(p[1].get('syncs'))} |")
    lines += ["", "| learning run | status | seconds | frames | frames/s | updates | rolling-100 (best) |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, entry in report.items():
        s = entry.get("summary")
        if s is not None:
            lines.append(f"| {name} | {s.get('status')} | {fmt(s.get('wall_seconds'))} | {fmt(s.get('frames'))} | "
                         f"{fmt(s.get('fps_run_mean'))} | {fmt(s.get('updates'))} | "
                         f"{fmt(s.get('score_mean_100'), 1)} ({fmt(s.get('score_best_100'), 1)}) |")
    failed = [name for name, entry in report.items() if entry.get("returncode")]
    if failed:
        lines += ["", f"Steps that failed (see their logs): {', '.join(failed)}"]
    return "\n".join(lines) + "\n"


@hydra.main(version_base="1.3", config_path="../../conf", config_name="device_check")
def main(cfg: DictConfig) -> None:
    from ga3c.config import ConfigError, validate

    try:
        validate(cfg)
    except ConfigError as error:
        print(f"ga3c: error: {error}", file=sys.stderr)
        sys.exit(2)
    from hydra.core.hydra_config import HydraConfig

    from ga3c.tools.manifest import write_manifest

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = list(HydraConfig.get().overrides.task)
    meta = dict(game=cfg.game.name, command=shlex.join(["python", "-m", "ga3c.tools.device_check", *task]),
                machine=machine_description(), date=time.strftime("%Y-%m-%d %H:%M"))
    planned = steps(cfg, user_overrides(for_bench=True), user_overrides(for_bench=False), out)
    codes, seconds = {}, {}
    for name, command, run_dir in planned:
        run_dir.mkdir(parents=True, exist_ok=True)
        log.info("%s: %s", name, shlex.join(command[1:]))
        started = time.monotonic()
        with open(out / f"{name}.log", "w") as output:
            codes[name] = run_to_end(command, output)
        seconds[name] = time.monotonic() - started
        log.info("%s: exit %d after %.0f s", name, codes[name], seconds[name])
    report = collect(planned, codes, seconds)
    import json

    (out / "device_check.json").write_text(json.dumps(dict(meta=meta, steps=report), indent=1, default=float))
    md = markdown(report, meta)
    (out / "device_check.md").write_text(md)
    write_manifest(out, "ga3c.tools.device_check", game=cfg.game.name,
                   step_seconds={k: round(v, 1) for k, v in seconds.items()},
                   settings=OmegaConf.to_container(cfg.device_check, resolve=True))
    print(md, flush=True)
    if any(codes.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()

"""Auto-tuning benchmark on Pong (not a test: pytest collects only test_*.py). Run one step at a time:

    python tests/bench_autotune.py grid --out bench/autotune --seconds 60 --agents 8,16,32 --predictors 1,2 --trainers 1,2
    python tests/bench_autotune.py tune --out bench/autotune --policy compass --start 2,1,1 --seconds 300
    python tests/bench_autotune.py report --out bench/autotune
    python tests/bench_autotune.py plot --out bench/autotune      # N_A, N_P, N_T over time, one PNG per run

`grid` runs a Hydra multirun sweep of fixed counts; each job's steady throughput is the mean of its window rates
after --warmup seconds. `tune` runs one auto-tuned run from a start setting. `report` prints, for each tuned run,
when the throughput (trailing mean over --trail seconds) first reached 90 % of the best fixed setting's, and the
mean throughput of each minute. Throughput = trained samples/s (also reported: trainings/s, env frames/s).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMON = ["game=pong", "net=small", "wandb.mode=disabled", "log.progress=false", "checkpoint.every_minutes=60",
          "max_frames=null"]


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def steady(run_dir: Path, warmup: float) -> dict:
    r = [x for x in rows(run_dir) if x["wall_seconds"] >= warmup]
    mean = lambda k: sum(x[k] for x in r) / len(r) if r else math.nan  # noqa: E731
    first = r[0] if r else {}
    return dict(agents=first.get("agents"), predictors=first.get("predictors"), trainers=first.get("trainers"),
                samples_per_s=mean("samples_per_s"), tps=mean("tps"), fps=mean("fps"), windows=len(r))


def run(cmd: list[str], log: Path) -> int:
    print("$", " ".join(cmd), flush=True)
    with open(log, "w") as f:
        return subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode


def grid(a) -> None:
    out = Path(a.out) / (a.name or "grid")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "train.py", "-m", *COMMON, f"agents={a.agents}", f"predictors={a.predictors}",
           f"trainers={a.trainers}", f"trainer.max_time=00:00:{a.seconds // 60:02d}:{a.seconds % 60:02d}",
           f"log.every_seconds={a.every}", f"hydra.sweep.dir={out}", "hydra.sweep.subdir=${hydra.job.num}",
           *a.overrides]
    run(cmd, out / "sweep.log")


def tune(a) -> None:
    na, np_, nt = a.start.split(",")
    run_dir = Path(a.out) / f"tune-{a.policy}-{na}-{np_}-{nt}"
    cmd = [sys.executable, "train.py", *COMMON, f"hydra.run.dir={run_dir}", f"autotune={a.policy}",
           f"agents={na}", f"predictors={np_}", f"trainers={nt}", f"log.every_seconds={a.every}",
           f"trainer.max_time=00:00:{a.seconds // 60:02d}:{a.seconds % 60:02d}", *a.overrides]
    run_dir.mkdir(parents=True, exist_ok=True)
    run(cmd, run_dir / "stdout.log")


def report(a) -> None:
    out = Path(a.out)
    fixed = []
    for d in sorted(out.glob("grid*/*/"), key=lambda p: (p.parent.name, int(p.name) if p.name.isdigit() else -1)):
        if (d / "metrics.jsonl").exists():
            fixed.append(steady(d, a.warmup))
    fixed.sort(key=lambda s: -s["samples_per_s"])
    print(f"fixed settings (steady means after {a.warmup:.0f} s):")
    print("| N_A/N_P/N_T | samples/s | trainings/s | frames/s |\n|---|---|---|---|")
    for s in fixed:
        print(f"| {s['agents']}/{s['predictors']}/{s['trainers']} | {s['samples_per_s']:.0f} | {s['tps']:.1f} | "
              f"{s['fps']:.0f} |")
    if not fixed:
        return
    best = fixed[0]["samples_per_s"]
    print(f"\nbest fixed: {best:.0f} samples/s; 90 % = {0.9 * best:.0f}\n")
    print("| policy | start | reached 90 % after | samples/s by minute | final N_A/N_P/N_T | decisions (changes) |")
    print("|---|---|---|---|---|---|")
    for d in sorted(out.glob("tune-*")):
        r = rows(d)
        if not r:
            continue
        reached = None
        for i, x in enumerate(r):
            window = [y for y in r[:i + 1] if y["wall_seconds"] > x["wall_seconds"] - a.trail]
            if x["wall_seconds"] >= a.trail and sum(y["samples_per_s"] for y in window) / len(window) >= 0.9 * best:
                reached = x["wall_seconds"]
                break
        minutes = []
        for m in range(int(r[-1]["wall_seconds"] // 60) + 1):
            w = [y["samples_per_s"] for y in r if m * 60 <= y["wall_seconds"] < (m + 1) * 60]
            if len(w) >= 3:
                minutes.append(f"{sum(w) / len(w):.0f}")
        decisions = [json.loads(line) for line in (d / "autotune.jsonl").read_text().splitlines()] \
            if (d / "autotune.jsonl").exists() else []
        changes = sum(x["next"] != x["measured"] for x in decisions)
        _, policy, na, np_, nt = d.name.split("-")
        last = r[-1]
        print(f"| {policy} | {na}/{np_}/{nt} | {'%.0f s' % reached if reached else 'not reached'} | "
              f"{' · '.join(minutes)} | {last['agents']}/{last['predictors']}/{last['trainers']} | "
              f"{len(decisions)} ({changes}) |")


def plot(a) -> None:
    """One PNG per tuned run: N_A, N_P, N_T and samples/s over time (the monitor's windows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for d in sorted(Path(a.out).glob("tune-*")):
        r = rows(d)
        if not r:
            continue
        t = [x["wall_seconds"] for x in r]
        fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
        for key in ("agents", "predictors", "trainers"):
            top.step(t, [x[key] for x in r], where="post", label=key)
        top.set_yscale("log", base=2)
        top.legend()
        top.set_title(d.name)
        bottom.plot(t, [x["samples_per_s"] for x in r])
        bottom.set_ylabel("samples/s")
        bottom.set_xlabel("seconds")
        fig.tight_layout()
        fig.savefig(Path(a.out) / f"{d.name}.png")
        plt.close(fig)
        print("wrote", Path(a.out) / f"{d.name}.png")


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid")
    g.add_argument("--agents", default="8,16,32")
    g.add_argument("--name", default=None, help="grid folder (default grid); several grid* folders are pooled")
    g.add_argument("--predictors", default="1,2")
    g.add_argument("--trainers", default="1,2")
    g.add_argument("overrides", nargs="*")
    t = sub.add_parser("tune")
    t.add_argument("--policy", default="compass")
    t.add_argument("--start", default="2,1,1")
    t.add_argument("overrides", nargs="*")
    r = sub.add_parser("report")
    pl = sub.add_parser("plot")
    r.add_argument("--warmup", type=float, default=20.0)
    r.add_argument("--trail", type=float, default=30.0)
    for s in (g, t, r, pl):
        s.add_argument("--out", default="bench/autotune")
        s.add_argument("--seconds", type=int, default=60)
        s.add_argument("--every", type=float, default=5.0)
    a = p.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    dict(grid=grid, tune=tune, report=report, plot=plot)[a.cmd](a)


if __name__ == "__main__":
    main()

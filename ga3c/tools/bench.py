"""The throughput benchmark (the paper's RQ1 and RQ5): GA3C against CPU A3C and the env-only ceiling.

    python -m ga3c.tools.bench game=pong net=small              # 3 arms x (warm-up + 60 s), one after another
    python -m ga3c.tools.bench game=pong net=large bench.seconds_per_arm=120

Each arm is a separate `python train.py` process with the same overrides, its own output subdirectory
and the same wall time: the env-only ceiling (`algo=ceiling`: GA3C's agent processes stepping random
actions, no network), A3C (`algo=a3c`) and GA3C (`algo=ga3c`). The bench polls each arm's summary.json,
measures its rates over the window after the warm-up (cumulative counters, not one window), samples the
CPU time of the arm's process tree, the machine's CPU and the GPU, and writes into its output directory:
bench.md (the table, ratios and where the time goes), bench.png (bar chart), bench.json; the same figures
go to W&B (job_type=bench). `algo=ceiling` (ga3c/algos/ceiling.py) also works on its own: `python train.py algo=ceiling`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from ga3c.config import usable_cores
from ga3c.tools import REPO
from ga3c.tools.runs import read_json

log = logging.getLogger(__name__)
ARM_ALGOS = {"ceiling": "ceiling", "a3c": "a3c", "ga3c": "ga3c"}
LABELS = {"ceiling": "env-only ceiling", "a3c": "A3C (CPU)", "ga3c": "GA3C"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- measuring an arm ------------------------------------------------------------------------------------
def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stat_cpu(stat: Path) -> tuple[str, float]:
    """(name, user + system CPU seconds) from a /proc/.../stat file of a process or thread."""
    head, tail = stat.read_text().rsplit(")", 1)
    fields = tail.split()
    return head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """user + system CPU seconds of each pid."""
    out = {}
    for pid in pids:
        try:
            out[pid] = stat_cpu(Path(f"/proc/{pid}/stat"))[1]
        except (OSError, IndexError, ValueError):
            continue
    return out


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of process `pid`, summed by label: the OS thread name the run gave it
    (predictor-N, trainer-N, watchdog: ga3c/thread_names.py), "learner (main)" for the main thread, which
    runs Lightning's loop, and "other" for the rest (torch's intra-op pool, Python's helpers)."""
    out: dict[str, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            name, seconds = stat_cpu(task / "stat")
        except (OSError, IndexError, ValueError):
            continue
        label = "learner (main)" if task.name == str(pid) else (
            name if name.startswith(("predictor-", "trainer-", "watchdog")) else "other")
        out[label] = out.get(label, 0.0) + seconds
    return out


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return math.nan, math.nan
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return float(sum(values[:8]) - idle), float(sum(values[:8]))


class GpuSampler(threading.Thread):
    """Samples GPU utilisation (nvidia-smi, every second) while an arm runs; nothing where there is no GPU."""

    def __init__(self):
        super().__init__(name="gpu-sampler", daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.available = shutil.which("nvidia-smi") is not None

    def run(self) -> None:
        while self.available and not self.stopping.wait(1.0):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                self.samples.append((time.monotonic(), sum(float(v) for v in out) / max(len(out), 1)))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.available = False

    def mean(self, start: float, end: float) -> float | None:
        inside = [u for t, u in self.samples if start <= t <= end]
        return sum(inside) / len(inside) / 100.0 if inside else None


def arm_overrides(cfg: DictConfig, arm: str, user: list[str], run_dir: Path) -> list[str]:
    """The overrides of one arm: the user's, then the arm's algo, output directory and a safety time limit
    (the bench itself stops the arm, with SIGINT, once it has measured it)."""
    bench = cfg.bench
    seconds = int(math.ceil(float(bench.warmup_seconds) + float(bench.seconds_per_arm)
                            + float(bench.startup_grace_seconds)))
    max_time = f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    extra = list((bench.get("arm_overrides") or {}).get(arm, []) or [])
    if arm == "a3c":
        a3c_agents = bench.a3c_agents if bench.a3c_agents is not None else usable_cores()  # as algo=a3c's default
        extra = [f"agents={a3c_agents}"] + extra
    replaced = {o.split("=", 1)[0].lstrip("+~") for o in extra} | {"algo"}
    kept = [o for o in user if o.split("=", 1)[0].lstrip("+~") not in replaced]
    group = cfg.wandb.group or f"bench-{cfg.game.name}"
    return [*kept, *extra, f"algo={ARM_ALGOS[arm]}", f"hydra.run.dir={run_dir}", f"trainer.max_time={max_time}",
            "max_frames=null", "ckpt_path=null", f"log.every_seconds={bench.log_every_seconds}",
            "log.progress=false", f"wandb.group={group}", f"wandb.name={arm}"]


def run_arm(cfg: DictConfig, arm: str, user: list[str], run_dir: Path, stop: threading.Event) -> dict:
    """Run one arm; poll its summary.json and CPU use. Its clock starts at its first frame (process and env
    start-up differ between arms and with the machine's load): warm-up, then the measured seconds, then
    the bench stops it with SIGINT (a graceful stop: final summary and checkpoint). Returns its figures."""
    bench = cfg.bench
    warmup, seconds = float(bench.warmup_seconds), float(bench.seconds_per_arm)
    command = [sys.executable, str(REPO / "train.py"), *arm_overrides(cfg, arm, user, run_dir)]
    print(f"[bench] {arm}: {shlex.join(command[1:])}", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    gpu = GpuSampler()
    gpu.start()
    seen: list[dict] = []          # distinct summaries, each with the poll sample when it first appeared
    last_wall, first_frame_wall, stopped_at = None, None, None
    started = time.monotonic()
    limit = warmup + seconds + float(bench.startup_grace_seconds) + 60
    with open(run_dir / "bench_arm.log", "w") as output:
        process = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # its own group: a timeout kills all of it
        try:
            while True:
                finished = process.poll() is not None
                summary = read_json(run_dir / "summary.json")
                now = time.monotonic()
                if summary is not None and summary.get("wall_seconds") != last_wall:
                    last_wall = summary.get("wall_seconds")
                    cpu = cpu_seconds(process_tree(process.pid)) if not finished else {}
                    threads = thread_cpu_seconds(process.pid) if not finished else {}
                    seen.append(dict(summary=summary, t=now, cpu=cpu, machine=machine_cpu(), threads=threads))
                    if first_frame_wall is None and summary.get("frames", 0) > 0:
                        first_frame_wall = last_wall
                        print(f"[bench] {arm}: first frames after {now - started:.0f} s", flush=True)
                if finished:
                    final = read_json(run_dir / "summary.json")   # a last write at the same wall time (only the
                    if seen and final is not None and final.get("wall_seconds") == last_wall:   # status moved)
                        seen[-1]["summary"] = final
                    break
                done = first_frame_wall is not None and last_wall - first_frame_wall >= warmup + seconds
                if (stop.is_set() or done) and stopped_at is None:
                    process.send_signal(signal.SIGINT)  # the arm's main process only: it stops its children
                    stopped_at = now
                    stop.clear()
                if now - started > limit or (stopped_at is not None and now - stopped_at > 90):
                    print(f"[bench] {arm}: did not end in time; stopping it", flush=True)
                    _terminate(process)
                    break
                time.sleep(float(bench.poll_seconds))
        except BaseException:
            _terminate(process)
            raise
        finally:
            gpu.stopping.set()
    returncode = process.wait()
    warm_from = (first_frame_wall if first_frame_wall is not None else 0.0) + warmup
    return measure(arm, seen, warm_from, gpu, returncode, run_dir)


def _terminate(process: subprocess.Popen) -> None:
    """SIGTERM the arm's process group (a graceful stop), SIGKILL what is left after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


WINDOW_MEANS = ("pps", "predictor_busy_share", "predictor_compute_share", "trainer_busy_share", "learner_busy_share",
                "prediction_batch_mean", "training_batch_mean", "prediction_queue_depth", "training_queue_depth",
                "batch_queue_depth", "policy_lag_mean", "a3c_env_share", "a3c_forward_share", "a3c_train_share",
                "a3c_sync_share")


def measure(arm: str, seen: list[dict], warm_from: float, gpu: GpuSampler, returncode: int, run_dir: Path) -> dict:
    """Rates over the measured window: from the first summary after the warm-up to the last one written
    while the arm still ran (the final one also covers the shutdown). Cumulative counters give frames/s,
    TPS and samples/s; window rates (PPS, shares, batch sizes) are averaged weighted by window length."""
    running = [s for s in seen if s["summary"].get("status") == "running"]
    final = seen[-1]["summary"] if seen else {}
    result = dict(arm=arm, label=LABELS[arm], returncode=returncode, status=final.get("status", "no summary"),
                  run_dir=run_dir.name, agents=final.get("agents"), predictors=final.get("predictors"),
                  trainers=final.get("trainers"), score_mean_100=final.get("score_mean_100"))
    after = [s for s in running if s["summary"]["wall_seconds"] >= warm_from]
    if len(after) < 2:  # a short arm: fall back to every running summary
        after = running
    if len(after) < 2:
        log.warning("arm %s wrote fewer than two summaries: no figures", arm)
        return result | dict(seconds=0.0)
    first, last = after[0], after[-1]
    a, b = first["summary"], last["summary"]
    dt = max(b["wall_seconds"] - a["wall_seconds"], 1e-9)
    result.update(seconds=dt, fps=(b["frames"] - a["frames"]) / dt,
                  tps=(b["updates"] - a["updates"]) / dt,
                  samples_per_s=(b["trained_steps"] - a["trained_steps"]) / dt)
    windows = after[1:]
    weights = [w["summary"]["wall_seconds"] - p["summary"]["wall_seconds"] for p, w in zip(after, after[1:])]
    for key in WINDOW_MEANS:
        pairs = [(w["summary"].get(key), x) for w, x in zip(windows, weights)]
        pairs = [(v, x) for v, x in pairs if isinstance(v, (int, float)) and not math.isnan(v)]
        total = sum(x for _, x in pairs)
        result[key] = sum(v * x for v, x in pairs) / total if total > 0 else None
    if arm == "ceiling":
        result["pps"] = 0.0  # no network: nothing is predicted or trained
    # CPU: the arm's process tree, and the whole machine (other users included), over the same window
    poll_dt = max(last["t"] - first["t"], 1e-9)
    tree = sum(max(v - first["cpu"].get(pid, 0.0), 0.0) for pid, v in last["cpu"].items())
    cores = os.cpu_count() or 1
    result["cpu_util"] = tree / poll_dt / cores
    (busy0, total0), (busy1, total1) = first["machine"], last["machine"]
    result["machine_cpu_busy"] = (busy1 - busy0) / (total1 - total0) if total1 > total0 else None
    result["gpu_util"] = gpu.mean(first["t"], last["t"])
    # per CPU-second of the arm: what the design costs, whatever share of a busy machine the arm got
    cpu_rate = tree / poll_dt
    # CPU-seconds per second of each thread of the arm's main process (1.0 = one core all the time): whether
    # the learner and predictor threads, which share one interpreter, are bound by it.
    result["thread_cpu"] = {label: max(seconds - first.get("threads", {}).get(label, 0.0), 0.0) / poll_dt
                            for label, seconds in sorted(last.get("threads", {}).items())}
    for key in ("fps", "samples_per_s"):
        result[f"{key}_per_cpu_s"] = result[key] / cpu_rate if cpu_rate > 0 else None
    return result


# --- the report ------------------------------------------------------------------------------------------
def fmt(value, digits: int = 0, percent: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if percent:
        return f"{100 * value:.0f} %"
    return f"{value:,.{digits}f}"


def ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    if not a or not b or not a.get(key) or not b.get(key):
        return None
    return a[key] / b[key]


def ratios(results: dict) -> dict:
    ga3c, a3c, ceiling = results.get("ga3c"), results.get("a3c"), results.get("ceiling")
    return {"ga3c_over_a3c_samples_per_s": ratio(ga3c, a3c, "samples_per_s"),
            "ga3c_over_a3c_fps": ratio(ga3c, a3c, "fps"),
            "ga3c_over_a3c_tps": ratio(ga3c, a3c, "tps"),
            "ga3c_over_a3c_samples_per_cpu_s": ratio(ga3c, a3c, "samples_per_s_per_cpu_s"),
            "ga3c_over_ceiling_fps": ratio(ga3c, ceiling, "fps"),
            "ga3c_over_ceiling_fps_per_cpu_s": ratio(ga3c, ceiling, "fps_per_cpu_s"),
            "a3c_over_ceiling_fps": ratio(a3c, ceiling, "fps")}


def markdown_header(meta: dict) -> list[str]:
    return [f"# GA3C throughput benchmark: {meta['game']}, net={meta['net']}", "",
            f"- command: `{meta['command']}`",
            f"- machine: {meta['machine']}",
            f"- {meta['seconds_per_arm']:.0f} s measured per arm after a {meta['warmup_seconds']:.0f} s warm-up; "
            f"arms run one after another; date {meta['date']}"]


def markdown(results: dict, meta: dict) -> str:
    r = ratios(results)
    lines = [*markdown_header(meta), "",
             "| arm | NA/NP/NT | env frames/s | PPS | TPS | training samples/s | CPU util (arm) | machine CPU busy "
             "| GPU util | frames per CPU-s | samples per CPU-s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm, m in results.items():
        counts = f"{m.get('agents')}/{m.get('predictors')}/{m.get('trainers')}"
        lines.append(f"| {m['label']} | {counts} | {fmt(m.get('fps'))} | {fmt(m.get('pps'))} | {fmt(m.get('tps'), 1)} "
                     f"| {fmt(m.get('samples_per_s'))} | {fmt(m.get('cpu_util'), percent=True)} "
                     f"| {fmt(m.get('machine_cpu_busy'), percent=True)} | {fmt(m.get('gpu_util'), percent=True)} "
                     f"| {fmt(m.get('fps_per_cpu_s'))} | {fmt(m.get('samples_per_s_per_cpu_s'))} |")
    lines += ["", "| ratio | value |", "| --- | ---: |",
              f"| GA3C / A3C, training samples/s | {fmt(r['ga3c_over_a3c_samples_per_s'], 2)} |",
              f"| GA3C / A3C, env frames/s | {fmt(r['ga3c_over_a3c_fps'], 2)} |",
              f"| GA3C / A3C, training samples per CPU-second (fair on a shared machine) "
              f"| {fmt(r['ga3c_over_a3c_samples_per_cpu_s'], 2)} |",
              f"| GA3C / env-only ceiling, env frames/s | {fmt(r['ga3c_over_ceiling_fps'], 2)} |",
              f"| GA3C / env-only ceiling, env frames per CPU-second | "
              f"{fmt(r['ga3c_over_ceiling_fps_per_cpu_s'], 2)} |",
              f"| A3C / env-only ceiling, env frames/s | {fmt(r['a3c_over_ceiling_fps'], 2)} |", "",
              "CPU util (arm): CPU time of the arm's processes over the measured window, as a share of all cores; "
              "machine CPU busy: the whole machine, other users included. Per CPU-second figures divide the rate "
              "by the arm's CPU use, so they compare designs fairly when the machine is shared.", ""]
    g, a = results.get("ga3c"), results.get("a3c")
    lines += ["## Where the time goes", ""]
    if g:
        busy, compute = g.get("predictor_busy_share"), g.get("predictor_compute_share")
        ipc = busy - compute if busy is not None and compute is not None else None
        idle = 1 - busy if busy is not None else None
        trainer = g.get("trainer_busy_share")
        lines += [
            "GA3C (share of wall time, mean per thread):", "",
            f"- predictors: {fmt(compute, percent=True)} forward pass (compute), {fmt(ipc, percent=True)} IPC "
            f"(gathering observations, answering agents), {fmt(idle, percent=True)} waiting for requests; "
            f"mean prediction batch {fmt(g.get('prediction_batch_mean'), 1)}, prediction queue depth "
            f"{fmt(g.get('prediction_queue_depth'), 1)}",
            f"- trainers: {fmt(trainer, percent=True)} assembling and handing over batches, "
            f"{fmt(None if trainer is None else 1 - trainer, percent=True)} waiting (for rollouts, or for the "
            f"learner when the batch queue is full); mean training batch {fmt(g.get('training_batch_mean'), 1)}, "
            f"batch queue depth {fmt(g.get('batch_queue_depth'), 1)} (full = the learner is the bottleneck, "
            "empty = the agents are)",
            f"- learner: {fmt(g.get('learner_busy_share'), percent=True)} in optimiser steps (near 100 % = the "
            "learner is the bottleneck; on a CPU it shares the cores with agents and predictors)",
            f"- CPU: the run used {fmt(g.get('cpu_util'), percent=True)} of the machine's cores; the machine as a "
            f"whole was {fmt(g.get('machine_cpu_busy'), percent=True)} busy; GPU: {fmt(g.get('gpu_util'), percent=True)}",
            f"- policy lag: {fmt(g.get('policy_lag_mean'), 1)} updates",
            "- threads of the learner's process, CPU-seconds per second (1 = one core): "
            + (", ".join(f"{k} {v:.2f}" for k, v in (g.get("thread_cpu") or {}).items()) or "n/a")
            + f"; together {fmt(sum((g.get('thread_cpu') or {}).values()), 2)}", ""]
    if a:
        lines += ["A3C (share of wall time, mean per agent process):", "",
                  f"- env {fmt(a.get('a3c_env_share'), percent=True)}, acting forward passes "
                  f"{fmt(a.get('a3c_forward_share'), percent=True)}, training (forward, backward, shared update) "
                  f"{fmt(a.get('a3c_train_share'), percent=True)}, weight sync {fmt(a.get('a3c_sync_share'), percent=True)}"
                  f"; CPU {fmt(a.get('cpu_util'), percent=True)} of the machine; policy lag "
                  f"{fmt(a.get('policy_lag_mean'), 1)} updates", ""]
    return "\n".join(lines)


def chart(results: dict, meta: dict, path: Path) -> None:
    from ga3c.tools.runs import pyplot

    plt = pyplot()

    metrics = [("fps", "env frames/s"), ("pps", "predictions/s (PPS)"), ("tps", "updates/s (TPS)"),
               ("samples_per_s", "training samples/s")]
    arms = list(results)
    colors = {"ceiling": "#999999", "a3c": "#d62728", "ga3c": "#1f77b4"}
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.6))
    for ax, (key, title) in zip(axes, metrics):
        values = [results[arm].get(key) or 0.0 for arm in arms]
        bars = ax.bar([LABELS[arm] for arm in arms], values, color=[colors[arm] for arm in arms])
        for bar, value in zip(bars, values):
            ax.annotate(f"{value:,.0f}" if value >= 10 else f"{value:.1f}", (bar.get_x() + bar.get_width() / 2,
                        bar.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8, rotation=15)
    r = ratios(results)
    fig.suptitle(f"{meta['game']}, net={meta['net']}: GA3C/A3C samples/s = {fmt(r['ga3c_over_a3c_samples_per_s'], 2)}, "
                 f"GA3C/ceiling frames/s = {fmt(r['ga3c_over_ceiling_fps'], 2)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def learner_figures(learner: dict | None) -> dict:
    """The learner micro-benchmark's figures as flat W&B keys."""
    figures = {}
    for size, r in (learner or {}).get("training", {}).items():
        figures |= {f"bench/learner/train_b{size}/ms": r["ms"], f"bench/learner/train_b{size}/ops": r["ops"],
                    f"bench/learner/train_b{size}/syncs": r["syncs"]}
        figures |= {f"bench/learner/train_b{size}/{k}_ms": v for k, v in r["phases_ms"].items()}
    for size, r in (learner or {}).get("prediction", {}).items():
        figures |= {f"bench/learner/predict_b{size}/{k}": r[k] for k in ("ms", "ops", "syncs")}
    return figures


def log_wandb(cfg: DictConfig, results: dict, meta: dict, out: Path, png: Path | None,
              learner: dict | None = None) -> None:
    if cfg.wandb.mode == "disabled":
        return
    import wandb

    from ga3c.runtime import finish_wandb

    w = cfg.wandb
    run = wandb.init(project=w.project, entity=w.entity, group=w.group or f"bench-{meta['game']}", job_type="bench",
                     name=w.name or f"bench-{meta['game']}-{meta['net']}", tags=list(w.tags) or None, mode=w.mode,
                     dir=str(out), config=dict(meta, bench=OmegaConf.to_container(cfg.bench, resolve=True)))
    keys = ["fps", "pps", "tps", "samples_per_s", "cpu_util", "machine_cpu_busy", "gpu_util",
            "fps_per_cpu_s", "samples_per_s_per_cpu_s"]
    table = wandb.Table(columns=["arm", *keys])
    figures = {}
    for arm, m in results.items():
        table.add_data(arm, *[m.get(k) for k in keys])
        figures.update({f"bench/{arm}/{k}": m[k] for k in keys if isinstance(m.get(k), (int, float))})
    figures.update({f"bench/{k}": v for k, v in ratios(results).items() if v is not None})
    figures.update(learner_figures(learner))
    run.log({**figures, "bench/table": table} | ({"bench/chart": wandb.Image(str(png))} if png else {}))
    run.summary.update(figures)
    finish_wandb()


def machine_description() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        torch_version = torch.__version__
    except Exception:  # noqa: BLE001
        gpu, torch_version = "unknown GPU", "?"
    return f"{os.cpu_count()} CPU cores ({model}), {gpu}, torch {torch_version}, Python {platform.python_version()}"


def run_bench(cfg: DictConfig, user_overrides: list[str], command: str) -> dict:
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    arms = [a for a in cfg.bench.arms if a != "learner"]
    unknown = [a for a in arms if a not in ARM_ALGOS]
    if unknown:
        from ga3c.config import ConfigError

        raise ConfigError(f"bench.arms: unknown arm(s) {unknown}; choose from {list(ARM_ALGOS)}")
    from hydra.core.hydra_config import HydraConfig

    try:
        net = HydraConfig.get().runtime.choices.get("net", "?")
    except ValueError:
        net = "?"
    meta = dict(game=cfg.game.name, net=net, command=command, machine=machine_description(),
                seconds_per_arm=float(cfg.bench.seconds_per_arm), warmup_seconds=float(cfg.bench.warmup_seconds),
                date=time.strftime("%Y-%m-%d %H:%M"))
    stop = threading.Event()
    interrupted = []

    def on_signal(signum, frame):
        interrupted.append(signum)
        stop.set()
        print(f"\n[bench] {signal.Signals(signum).name}: stopping the running arm; no further arms", flush=True)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    results: dict[str, dict] = {}
    try:
        for arm in arms:
            if interrupted:
                break
            results[arm] = run_arm(cfg, arm, user_overrides, out / arm, stop)
            m = results[arm]
            print(f"[bench] {arm}: {m.get('status')} | frames/s {fmt(m.get('fps'))} | PPS {fmt(m.get('pps'))} | "
                  f"TPS {fmt(m.get('tps'), 1)} | samples/s {fmt(m.get('samples_per_s'))} | "
                  f"CPU {fmt(m.get('cpu_util'), percent=True)}", flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    learner = None
    if "learner" in cfg.bench.arms and not interrupted:   # in this process, after the arms (a quiet machine)
        from ga3c.tools.learner_bench import learner_bench

        learner = learner_bench(cfg, out)
    report = dict(meta=meta, arms=results, ratios=ratios(results), learner=learner)
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=float))
    from ga3c.tools.manifest import write_manifest

    write_manifest(out, "ga3c.tools.bench", game=meta["game"], net=net,
                   frames_per_second={arm: m.get("fps") for arm, m in results.items()})
    md = markdown(results, meta) if results else "\n".join(markdown_header(meta)[:-1] + [""])
    if learner is not None:
        from ga3c.tools import learner_bench

        md += "\n" + "\n".join(learner_bench.markdown(learner))
    (out / "bench.md").write_text(md)
    png = None
    if results:
        try:
            import matplotlib  # noqa: F401

            png = out / "bench.png"
            chart(results, meta, png)
        except ImportError:   # a machine without it (a lent GPU's image): the table and JSON say it all
            print("[bench] matplotlib is not installed: no bench.png", flush=True)
    log_wandb(cfg, results, meta, out, png, learner)
    print(md, flush=True)
    print(f"[bench] wrote {out / 'bench.md'}, {png or '(no chart: no arm ran)'}, {out / 'bench.json'}", flush=True)
    failed = [arm for arm, m in results.items() if m.get("returncode") not in (0, None)]
    if failed:
        print(f"[bench] arm(s) failed: {failed}; see */bench_arm.log", file=sys.stderr, flush=True)
    return report


@hydra.main(version_base="1.3", config_path="../../conf", config_name="bench")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    task = list(HydraConfig.get().overrides.task)
    user = [o for o in task if not o.lstrip("+~").startswith(("bench.", "output_dir", "hydra."))]
    command = shlex.join(["python", "-m", "ga3c.tools.bench", *task])
    report = run_bench(cfg, user, command)
    if any(m.get("returncode") not in (0, None) for m in report["arms"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()

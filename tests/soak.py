"""Soak test (run by hand, not collected by pytest): a long Pong run whose counts keep changing, sampled for
memory, file descriptors and shared-memory segments; ends with the experience ledger.

    python tests/soak.py --minutes 30 --out /tmp/soak

Prints one line per sample and a verdict: resident memory (PSS, all processes of the run) growth after
warm-up, fd and /dev/shm counts first vs last, and produced = trained + discarded + in flight.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from helpers import REPO, descendants  # noqa: E402


def pss_mib(pids: list[int]) -> float:
    """Proportional set size: shared memory counted once across the processes that map it."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def role(pid: int, learner: int) -> str:
    """learner (the train.py process), agent (a child of the forkserver), or other (the forkserver itself,
    the W&B service)."""
    if pid == learner:
        return "learner"
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        parent_cmdline = Path(f"/proc/{ppid}/cmdline").read_bytes()
    except (OSError, IndexError, ValueError):
        return "other"
    return "agent" if b"forkserver" in parent_cmdline else "other"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--out", default="/tmp/ga3c-soak")
    parser.add_argument("--warmup-minutes", type=float, default=3)
    parser.add_argument("--every", type=float, default=30, help="seconds between samples")
    parser.add_argument("overrides", nargs="*", default=["game=pong", "autotune=on", "autotune.period_seconds=20",
                                                          "wandb.mode=offline"])
    args = parser.parse_args()
    out = Path(args.out)
    command = [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={out}", "max_frames=null",
               "log.progress=false", f"trainer.max_time=00:00:{int(args.minutes):02d}:{int(args.minutes % 1 * 60):02d}",
               *args.overrides]
    print(" ".join(command), flush=True)
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = []
    start = time.monotonic()
    try:
        while process.poll() is None:
            time.sleep(args.every)
            pids = [process.pid, *descendants(process.pid)]
            try:
                fds = len(os.listdir(f"/proc/{process.pid}/fd"))
            except OSError:
                break
            shm = len([n for n in os.listdir("/dev/shm") if n.startswith("ga3c_")])
            summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
            by_role: dict[str, list[int]] = {"learner": [], "agent": [], "other": []}
            for pid in pids:
                by_role[role(pid, process.pid)].append(pid)
            sample = dict(minute=(time.monotonic() - start) / 60, pss_mib=pss_mib(pids), processes=len(pids),
                          learner_mib=pss_mib(by_role["learner"]), agents_mib=pss_mib(by_role["agent"]),
                          other_mib=pss_mib(by_role["other"]),
                          fds=fds, shm=shm, agents=summary.get("agents"), predictors=summary.get("predictors"),
                          trainers=summary.get("trainers"), fps=summary.get("fps"))
            if process.poll() is not None or not sample["pss_mib"]:
                break  # the run ended while sampling: not a sample of a running run
            samples.append(sample)
            print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in sample.items()}), flush=True)
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
    process.wait()
    summary = json.loads((out / "summary.json").read_text())
    warm = [s for s in samples if s["minute"] >= args.warmup_minutes] or samples
    # Memory per agent process varies with the tuned count: compare samples at the same agent count too.
    first, last = warm[0], warm[-1]
    peak = max(s["pss_mib"] for s in warm)
    same = [s for s in warm if s["agents"] == last["agents"]]
    print("\n--- verdict ---")
    print(f"PSS after warm-up: first {first['pss_mib']:.0f} MiB (NA={first['agents']}), last {last['pss_mib']:.0f} MiB "
          f"(NA={last['agents']}), peak {peak:.0f} MiB; same-NA first->last {same[0]['pss_mib']:.0f} -> "
          f"{same[-1]['pss_mib']:.0f} MiB ({(same[-1]['pss_mib'] / same[0]['pss_mib'] - 1) * 100:+.1f} %)")
    print(f"by process, same-NA first->last: learner {same[0]['learner_mib']:.0f} -> {same[-1]['learner_mib']:.0f} MiB, "
          f"agents {same[0]['agents_mib']:.0f} -> {same[-1]['agents_mib']:.0f} MiB, other (forkserver, W&B service) "
          f"{same[0]['other_mib']:.0f} -> {same[-1]['other_mib']:.0f} MiB")
    print(f"open fds of the learner process: first {first['fds']}, last {last['fds']}; /dev/shm segments: "
          f"first {first['shm']}, last {last['shm']}")
    counts = sorted({(s['agents'], s['predictors'], s['trainers']) for s in samples if s['agents']})
    print(f"counts seen (NA, NP, NT): {counts}")
    ledger = summary["trained_steps"] + summary["discarded_steps"] + summary["in_flight_steps"]
    print(f"ledger: produced {summary['produced_steps']} = trained {summary['trained_steps']} + discarded "
          f"{summary['discarded_steps']} + in flight {summary['in_flight_steps']}: "
          f"{'balanced' if ledger == summary['produced_steps'] else 'NOT balanced'}; status {summary['status']}, "
          f"frames {summary['frames']}, agent restarts {summary['agent_restarts']}")


if __name__ == "__main__":
    main()

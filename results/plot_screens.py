"""Score and policy entropy against frames for screening runs (CSV files from extract.py), one line each:
    python results/plot_screens.py OUT.png A.csv B.csv ..."""
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def number(text: str) -> float:
    return float(text) if text not in ("", "nan") else float("nan")   # a window without episodes or updates


fig, (score_ax, entropy_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
for path in sys.argv[2:]:
    rows = list(csv.DictReader(open(path)))
    frames = [float(r["frames"]) / 1e6 for r in rows]
    score = [number(r["score_mean_100"]) for r in rows]
    score_ax.plot(frames, score, label=Path(path).stem)
    entropy_ax.plot(frames, [number(r["loss/entropy"]) for r in rows], label=Path(path).stem)
score_ax.set(xlabel="frames (M)", ylabel="rolling-100 score", title="score")
entropy_ax.set(xlabel="frames (M)", ylabel="policy entropy (nats)", title="entropy of the policy")
for ax in (score_ax, entropy_ax):
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=90)

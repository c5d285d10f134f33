"""Reduce a run's metrics.jsonl to the columns a learning curve needs (small enough to commit):
    python results/extract.py RUN_DIR OUT.csv"""
import csv
import json
import sys

KEYS = ["wall_seconds", "frames", "updates", "score_mean_100", "loss/entropy", "loss/value_loss", "policy_lag_mean",
        "fps", "training_batch_mean", "grad_norm"]
rows = [json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl") if line.strip().endswith("}")]
with open(sys.argv[2], "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(KEYS)
    for row in rows:
        writer.writerow([("" if row.get(k) is None else round(float(row[k]), 4)) for k in KEYS])

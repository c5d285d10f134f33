"""Study tools over training runs, each `python -m ga3c.tools.NAME`: bench (throughput), learncurve (score
against wall time over seeds and arms), suite (learncurve over many games, one table), play (evaluate a
checkpoint), report (HTML and W&B reports), device_check (a GPU machine in one table); manifest (where each
results folder's figures came from)."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]   # the repository root: train.py and conf/ (the tools run them)

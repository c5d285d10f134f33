"""Study tools over training runs, each `python -m ga3c.tools.NAME`: bench (throughput), learncurve (score
against wall time over seeds and arms), suite (learncurve over many games, one table), play (evaluate a
checkpoint), report (HTML and W&B reports); manifest (where each results folder's figures came from)."""

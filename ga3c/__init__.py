"""GA3C: asynchronous advantage actor-critic on a GPU (Babaeizadeh et al., ICLR 2017).

Data flow, one file per role:
    agent.py (processes, one env each)
      -> prediction queue (shared_memory.py) -> predictor.py (threads, batched forward pass)
      -> training queue (shared_memory.py)   -> trainer.py (threads, batch assembly, IterableDataset)
      -> learner.py (LightningModule: the one actor-critic of networks.py)
    server.py starts and stops them all; monitor.py measures; autotune.py changes the counts.
Runs: algos/ hands a config to its algo= module (algos/ga3c.py, algos/a3c.py, algos/ceiling.py), all over
runtime.py. Study tools: tools/ (bench, learncurve, suite, play, report, manifest); probe_envs.py (game=cue).
Layers: this top level imports neither algos/ nor tools/; algos/ imports no tools/ (tests/test_layout.py).

This package must stay importable without torch: agent processes import it.
"""
from ga3c import config as _config  # noqa: E402,F401  registers the ${machine:...} resolver of conf/config.yaml

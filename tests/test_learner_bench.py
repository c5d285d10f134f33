"""The learner micro-benchmark: its counter sees host synchronisations, and the configured updates have none."""
from __future__ import annotations

import torch

from helpers import REPO
from ga3c.tools.learner_bench import DispatchCounter, learner_bench, markdown


def bench_config(*overrides: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="bench", overrides=[*overrides, "output_dir=/tmp/ga3c-unused"])


def test_dispatch_counter_counts_operations_and_host_synchronisations():
    x = torch.arange(6.0)
    with DispatchCounter() as counter:
        y = x * 2 + 1                 # two operations, no synchronisation
    assert counter.total_ops == 2 and counter.total_syncs == 0
    with DispatchCounter() as counter:
        float(y.sum())                # a scalar read back
        y[y > 3]                      # a boolean mask: a data-dependent shape
        y.cpu()                       # a copy to the host (free here, a wait on a GPU)
        y.nonzero()
    assert counter.syncs["_local_scalar_dense"] == 1 and counter.syncs["index(bool mask)"] == 1
    assert counter.syncs["Tensor.cpu"] == 1 and counter.syncs["nonzero"] == 1
    assert torch.Tensor.cpu.__name__ == "cpu"   # the copy counter is removed on exit


def test_updates_and_predictor_batches_have_the_fewest_host_synchronisations():
    """0 per update and 1 per predictor batch, on the default Pong config (V-trace, bf16 where native, conv net)
    and on CartPole (no correction, MLP, Adam), through Lightning's fit loop and by direct calls."""
    for overrides in (["game=pong", "net=small"], ["game=cartpole"]):
        cfg = bench_config(*overrides, "bench.learner.batch_sizes=[10]", "bench.learner.prediction_batch_sizes=[4]",
                           "bench.learner.updates=3", "bench.learner.warmup_updates=2")
        results = learner_bench(cfg)
        (size, training), = results["training"].items()   # 10 samples rounded down to whole rollouts
        assert training["syncs"] == 0 and training["direct_syncs"] == 0, (overrides, training["sync_ops"])
        assert training["ops"] > 50 and training["ms"] > 0
        assert set(training["phases_ms"]) == {"copy", "forward", "backward", "optimizer", "rest"}
        assert results["prediction"][4]["syncs"] == 1 and results["prediction"][4]["ops"] > 5
        table = "\n".join(markdown(results))
        assert f"| {size} |" in table and "| 4 |" in table

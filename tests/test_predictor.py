"""Predictor threads on the real shared memory and pipes: batching, max batch, the bf16 acting copy, a recurrent
net's state."""
from __future__ import annotations

import time

import numpy as np
import torch

from ga3c.networks import ConvActorCritic, RecurrentActorCritic
from ga3c.predictor import Predictor
from ga3c.shared_memory import PREDICTION_REQUEST


from fake_server import FakeServer, assert_eventually


def test_predictor_batches_all_waiting_requests_in_one_forward_pass():
    server = FakeServer()
    request = np.zeros(1, PREDICTION_REQUEST)
    for agent in range(6):  # six agents ask at once, one of them a dead agent's stale request
        request["agent"], request["generation"] = agent, 0 if agent < 5 else 9
        server.prediction_queue.put(request)
    predictor = Predictor(server, 0, max_batch=128)
    predictor.start()
    try:
        assert_eventually(lambda: len(server.answered) == 5)
        time.sleep(0.2)
    finally:
        predictor.stopping.set()
        predictor.join(2)
    assert predictor.batches == 1 and predictor.predictions == 5
    assert sorted(server.answered) == [0, 1, 2, 3, 4]
    assert (server.buffers.answer_version[:5] == 7).all()
    assert set(server.buffers.answer_action[:5]) <= {0, 1, 2}


def test_predictor_acts_with_a_bf16_copy_refreshed_per_learner_update():
    server = FakeServer()
    server.learner.model = ConvActorCritic((4, 84, 84), 3, [16, 32], [8, 4], [4, 2], 64)
    server.learner.autocast_dtype = torch.bfloat16
    predictor = Predictor(server, 0, max_batch=128)
    model, version = predictor.acting_model()
    assert version == 7 and next(model.parameters()).dtype == torch.bfloat16
    obs = torch.randint(0, 255, (5, 4, 84, 84), dtype=torch.uint8)
    with torch.inference_mode():
        low_logits, low_values = model(obs)
        logits, values = server.learner.model(obs)
    assert torch.allclose(low_logits.float(), logits, atol=0.05) and torch.allclose(low_values.float(), values, atol=0.05)

    with torch.no_grad():  # a learner update: the copy follows at the next version, not before
        for p in server.learner.model.parameters():
            p.add_(0.5)
    assert predictor.acting_model()[0] is model and not torch.equal(
        model.value.bias.float(), server.learner.model.value.bias.to(torch.bfloat16).float())
    server.learner.version = 8
    model, version = predictor.acting_model()
    assert version == 8
    assert torch.equal(model.value.bias, server.learner.model.value.bias.to(torch.bfloat16))


def test_predictor_respects_max_batch():
    server = FakeServer()
    request = np.zeros(1, PREDICTION_REQUEST)
    for agent in range(8):
        request["agent"] = agent
        server.prediction_queue.put(request)
    predictor = Predictor(server, 0, max_batch=3)
    predictor.start()
    try:
        assert_eventually(lambda: len(server.answered) == 8)
    finally:
        predictor.stopping.set()
        predictor.join(2)
    assert predictor.batches == 3  # 3 + 3 + 2


def test_predictor_advances_each_agents_recurrent_state_and_zeroes_it_where_an_episode_begins():
    """Agent 0's step begins an episode (its stale state must not leak in), agent 1's continues one; each gets
    the step from its own state, keeps the state before it (entry_state) and the state after it (state)."""
    torch.manual_seed(0)
    server = FakeServer(core=8)
    model = RecurrentActorCritic((4,), 3, core=8, hidden=16)
    server.learner.model = model
    buffers = server.buffers
    assert buffers.recurrent and buffers.state.shape == (8, 2, 8)
    buffers.obs[:2, 0, 3] = np.random.default_rng(0).normal(size=(2, 4))
    buffers.state[:2] = np.random.default_rng(1).normal(size=(2, 2, 8))
    before = buffers.state[:2].copy()
    buffers.starts[0, 0, 3], buffers.starts[1, 0, 3] = 1, 0
    request = np.zeros(1, PREDICTION_REQUEST)
    for agent in (0, 1):
        request["agent"], request["slot"], request["step"] = agent, 0, 3
        server.prediction_queue.put(request)
    predictor = Predictor(server, 0, max_batch=128)
    predictor.start()
    try:
        assert_eventually(lambda: len(server.answered) == 2)
    finally:
        predictor.stopping.set()
        predictor.join(2)
    np.testing.assert_array_equal(buffers.entry_state[0], 0.0)          # an episode began: from zero
    np.testing.assert_array_equal(buffers.entry_state[1], before[1])    # carried on
    with torch.no_grad():
        for agent in (0, 1):
            entry = torch.from_numpy(buffers.entry_state[agent:agent + 1].copy())
            _, value, (h, c) = model.step(torch.from_numpy(buffers.obs[agent:agent + 1, 0, 3]),
                                          (entry[:, 0], entry[:, 1]), torch.zeros(1, dtype=torch.bool))
            np.testing.assert_allclose(buffers.state[agent, 0], h[0].numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(buffers.state[agent, 1], c[0].numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(buffers.answer_value[agent], value[0].item(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(buffers.state[2:], 1.0)   # other agents untouched (zeros)
    np.testing.assert_array_equal(buffers.state[2:], 0.0)


def test_a_feed_forward_net_has_no_recurrent_fields():
    buffers = FakeServer().buffers
    assert not buffers.recurrent and buffers.state.size == buffers.start_state.size == buffers.starts.size == 0



def test_act_samples_the_policy_by_gumbel_max_and_returns_one_host_array():
    """act() draws each action with the policy's probabilities (Gumbel-max), returns action, log-probability and
    value in one float32 array, and the log-probability is the chosen action's."""
    from ga3c.predictor import act

    class Fixed(torch.nn.Module):
        def forward(self, obs):
            logits = torch.log(torch.tensor([0.6, 0.3, 0.1])).expand(len(obs), 3)
            return logits, obs[:, 0] * 2.0

    torch.manual_seed(0)
    obs = torch.arange(20_000, dtype=torch.float32).unsqueeze(1)
    answers = act(Fixed(), obs, torch.device("cpu"))
    assert answers.shape == (20_000, 3) and answers.dtype == np.float32
    actions = answers[:, 0].astype(int)
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / len(actions), [0.6, 0.3, 0.1], atol=0.015)
    np.testing.assert_allclose(answers[:, 1], np.log([0.6, 0.3, 0.1])[actions], rtol=1e-5)
    np.testing.assert_allclose(answers[:, 2], 2.0 * obs[:, 0].numpy())


def test_act_does_not_raise_on_a_nan_policy():
    """Weights gone NaN are the learner's to report (once a window): a predictor acting meanwhile answers
    valid action indices instead of failing its thread (torch.multinomial raised here)."""
    from ga3c.predictor import act

    model = ConvActorCritic((4, 84, 84), 3, [16, 32], [8, 4], [4, 2], 64)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    answers = act(model, torch.zeros(5, 4, 84, 84, dtype=torch.uint8), torch.device("cpu"))
    assert set(answers[:, 0].astype(int)) <= {0, 1, 2}

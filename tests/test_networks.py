"""The networks: output shapes."""
from __future__ import annotations


import pytest
import torch

from ga3c.networks import ConvActorCritic, MLPActorCritic


# --- n-step returns ------------------------------------------------------------------------------------


def test_networks_shapes():
    conv = ConvActorCritic((4, 84, 84), 6, [16, 32], [8, 4], [4, 2], 256)
    logits, value = conv(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and value.shape == (3,)
    mlp = MLPActorCritic((4,), 2, [8])
    logits, value = mlp(torch.zeros(5, 4))
    assert logits.shape == (5, 2) and value.shape == (5,)
    with pytest.raises(ValueError, match="net=mlp"):
        ConvActorCritic((4,), 2, [16], [8], [4], 32)

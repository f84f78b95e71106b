"""The weight push's group and bounds, without engines (fast): the gloo group carries a tensor from
rank 0 to another rank, a group whose peer never comes fails instead of hanging, and a push blocked on
a peer becomes a TimeoutError naming synchronizer.sync_timeout. The push itself, from two veRL ranks
and from the torch trainer into a vLLM engine, runs in tests/test_verl_trainer.py and
tests/test_policy_contract.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from vllm.utils.network_utils import get_open_port

from backends.local.gloo_transfer import GlooGroup
from backends.local.weight_sync import _bounded


def test_the_gloo_group_broadcasts_from_rank_0() -> None:
    port = get_open_port()
    sent = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    received = torch.empty(3, 4, dtype=torch.bfloat16)

    def member(rank: int) -> None:
        group = GlooGroup("127.0.0.1", port, rank, 2, timeout_s=60)
        group.broadcast(sent.clone() if rank == 0 else received, src=0)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(member, 0), pool.submit(member, 1)]:
            future.result(timeout=120)
    assert torch.equal(received, sent)


def test_a_group_whose_peer_never_comes_fails() -> None:
    with pytest.raises(RuntimeError):  # torch's DistStoreError: the store waited timeout_s for rank 1
        GlooGroup("127.0.0.1", get_open_port(), 0, 2, timeout_s=2)


def test_a_push_blocked_on_a_peer_is_a_timeout_naming_the_setting() -> None:
    release = threading.Event()
    with pytest.raises(TimeoutError, match="synchronizer.sync_timeout"):
        _bounded(lambda: release.wait(30), 0.5, "pushing weights version 3")
    release.set()
    assert _bounded(lambda: 7, 5, "a quick push") == 7

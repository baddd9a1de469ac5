"""The DDP hook's checkpoints and its communication thread, checked in this process.

* Loading a checkpoint into a hook state that has already communicated restores which tensors'
  shared sections were checked.
* An all-reduce over a real process group writes the sum into the caller's tensor only when asked.
* Waiting for the communication thread returns only once every submitted job has run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from gcbench.envs.collectives import TorchCollective
from gcbench.envs.comm_thread import CommThread, CommThreadError
from gcbench.envs.ddp_hook import GCBenchHookState


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """A one-rank gloo process group in this process, torn down afterwards."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_loaded_checkpoint_restores_the_checked_tensors(one_rank_group: None) -> None:
    """A state already bound to its group takes the checkpoint's checked tensors."""
    state = GCBenchHookState("randomk", model=torch.nn.Linear(4, 2), compile_ahead=False)
    saved = state.state_dict()
    assert saved["verified"] == []
    saved["verified"] = ["bias", "weight"]
    state.load_state_dict(saved)
    assert sorted(state.aggregator.verified_keys()) == ["bias", "weight"]


def test_a_process_group_all_reduce_writes_in_place_only_when_asked(one_rank_group: None) -> None:
    """Without ``inplace`` the caller's tensor is left alone; with it, the sum is the caller's tensor."""
    coll = TorchCollective()
    t = torch.tensor([1.0, 2.0, 3.0])
    (out,) = coll.all_reduce([t])
    assert out is not t and out.data_ptr() != t.data_ptr() and torch.equal(out, t)
    (same,) = coll.all_reduce([t], inplace=True)
    assert same is t


def test_waiting_for_the_thread_waits_for_the_last_job() -> None:
    """With one job still blocked, waiting (bounded) reports the job as still running."""
    thread = CommThread()
    release = threading.Event()
    started = threading.Event()

    def blocked() -> int:
        started.set()
        release.wait(30)
        return 1

    try:
        fut = thread.submit(blocked)
        assert started.wait(30)
        with pytest.raises(CommThreadError, match="still running"):
            thread.drain(timeout=0.05)
        release.set()
        thread.drain(timeout=30)
        assert fut.wait() == 1
    finally:
        release.set()
        thread.close()

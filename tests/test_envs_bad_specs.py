"""A bad codec name or parameter is refused where the DDP hook's state or the simulated cluster is
built, with the codec's own typed error, not in the first backward pass (where DDP would raise it
from inside the hook on every rank)."""

from __future__ import annotations

import pytest
import torch
from gcbench.envs.ddp_hook import GCBenchHookState
from gcbench.envs.errors import UnsupportedTopologyError
from gcbench.envs.simulated import SimulatedCluster
from gcbench.envs.workers import CodecSpec

from gcbench.compressors.errors import InvalidParameterError, UnknownCodecError

BAD = [
    ("nope", {}, {}, UnknownCodecError, "unknown codec 'nope'"),
    ("qsgd", {"levels": -1}, {}, InvalidParameterError, "levels must be in"),
    ("qsgd", {"bogus": 1}, {}, InvalidParameterError, "bogus"),
    ("qsgd", {}, {"layer_params": {"weight": {"levels": 0}}}, InvalidParameterError, "levels must be in"),
    ("sketched-sgd", {}, {"error_feedback": True}, UnsupportedTopologyError, "own error accumulation"),
    (42, {}, {}, TypeError, "registry name, a CodecSpec or a factory"),
]


def _hook(codec, params, kw):
    return GCBenchHookState(codec, params, model=torch.nn.Linear(4, 2), **kw)


def _simulated(codec, params, kw):
    return SimulatedCluster(torch.nn.Linear(4, 2), 2, codec, params, **kw)


@pytest.mark.parametrize("build", [_hook, _simulated], ids=["hook", "simulated"])
@pytest.mark.parametrize("codec, params, kw, error, words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_spec_is_refused_at_construction(build, codec, params, kw, error, words):
    with pytest.raises(error, match=words):
        build(codec, params, kw)


def test_a_ready_spec_is_checked_too():
    with pytest.raises(InvalidParameterError, match="levels must be in"):
        GCBenchHookState(CodecSpec(name="qsgd", params={"levels": 0}))
    with pytest.raises(InvalidParameterError, match="levels must be in"):
        SimulatedCluster(torch.nn.Linear(4, 2), 2, "fp16", topology="parameter_server",
                         pull_codec=CodecSpec(name="qsgd", params={"levels": 0}))


@pytest.mark.parametrize("kw, words", [({"verify_shared": "x"}, "verify_shared"), ({"timeout_s": 0}, "timeout_s")])
def test_the_hooks_own_options_are_checked(kw, words):
    with pytest.raises(ValueError, match=words):
        GCBenchHookState("qsgd", **kw)


def test_the_check_builds_each_parameter_set_once():
    calls = []

    def factory(**params):
        from gcbench import compressors

        calls.append(params)
        return compressors.get("qsgd", **params)

    GCBenchHookState(factory, {"levels": 7}, layer_params={"w": {"levels": 3}})
    assert calls == [{"levels": 7}, {"levels": 3}]  # the shared parameters, then the layer's

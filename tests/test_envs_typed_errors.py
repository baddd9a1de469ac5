"""Bad use of the training API (the DDP hook's state, the simulated cluster, a codec spec, the
launcher's placement) raises a typed gcbench error, which stays a ValueError or TypeError."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors.errors import GCBenchError, InvalidParameterError, UnsupportedInputError
from gcbench.envs.ddp_hook import GCBenchHookState
from gcbench.envs.launch import check_timeout, placement
from gcbench.envs.simulated import SimulatedCluster
from gcbench.envs.workers import CodecSpec


def _model() -> torch.nn.Module:
    return torch.nn.Linear(4, 2)


@pytest.mark.parametrize(
    "build, base",
    [
        (lambda: GCBenchHookState("topk", verify_shared="bogus"), ValueError),
        (lambda: GCBenchHookState("topk", timeout_s=-1), ValueError),
        (lambda: GCBenchHookState("topk", non_finite="skip"), ValueError),
        (lambda: SimulatedCluster(_model(), 2, "topk", non_finite="skip"), ValueError),
        (lambda: CodecSpec(), ValueError),
        (lambda: CodecSpec.of(3.5), TypeError),
        (lambda: placement("tpu", 1, None, gpus=0), ValueError),
        (lambda: check_timeout(0.0), ValueError),
    ],
)
def test_bad_use_raises_a_typed_error(build, base):
    with pytest.raises(GCBenchError) as raised:
        build()
    assert isinstance(raised.value, base)
    assert isinstance(raised.value, InvalidParameterError if base is ValueError else UnsupportedInputError)


@pytest.mark.parametrize(
    "extra",
    [{"params": {"ratio": 0.5}}, {"error_feedback": True}, {"layer_params": {"w": {"ratio": 0.5}}}],
)
def test_a_ready_spec_refuses_settings_beside_it(extra):
    """A ready spec carries its own settings: error feedback or parameters given beside it would be
    dropped without a word (a run asked for error feedback would train without it)."""
    spec = CodecSpec(name="topk", params={"ratio": 0.1})
    params = extra.pop("params", None)
    with pytest.raises(InvalidParameterError, match="set them in the spec"):
        CodecSpec.of(spec, params, **extra)
    with pytest.raises(InvalidParameterError, match="set them in the spec"):
        GCBenchHookState(spec, params, **extra)
    assert CodecSpec.of(spec) is spec  # alone, it is taken as it is

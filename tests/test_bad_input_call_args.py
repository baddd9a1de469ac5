"""Typed refusals of bad call arguments and bad state dicts, before any state is read or changed:
an unhashable ``key``, a ``generator`` that is not a ``torch.Generator``, a state dict that is not a
mapping of names to tensors, and integer buffers where a codec keeps floating state."""

from __future__ import annotations

import pytest
import torch

from gcbench import compressors
from gcbench.compressors.errors import StateError, UnsupportedInputError
from gcbench.compressors.methods.sketched_sgd import SketchedSGDWorker

STATEFUL = ["dgc", "ef-signsgd", "3lc", "powersgd"]


@pytest.mark.parametrize("name", compressors.names())
def test_an_unhashable_key_or_a_foreign_generator_is_refused(name):
    codec = compressors.get(name)
    x = torch.randn(64)
    with pytest.raises(UnsupportedInputError, match="hashable"):
        codec.encode(x, key=[1])
    with pytest.raises(UnsupportedInputError, match="torch.Generator"):
        codec.encode(x, key="w", generator="x")
    codec.encode(x, key="w")  # still works, nothing stored by the refusals


@pytest.mark.parametrize("name", STATEFUL)
def test_error_feedback_refuses_the_same_before_its_residual_is_touched(name):
    ef = compressors.get(name) if name in ("ef-signsgd", "3lc") else compressors.ErrorFeedback(compressors.get(name))
    x = torch.randn(64)
    ef.encode(x, key="w")
    before = {k: t.clone() for k, t in ef.state_dict().items()}
    with pytest.raises(UnsupportedInputError):
        ef.encode(x, key={"a": 1})
    after = ef.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("name", ["identity", *STATEFUL])
@pytest.mark.parametrize("state", [[1, 2], {"u/w": [1.0]}, {1: torch.zeros(2)}])
def test_a_state_dict_that_is_not_names_to_tensors_is_refused(name, state):
    codec = compressors.get(name)
    codec.encode(torch.randn(64), key="w")
    before = codec.state_dict()
    with pytest.raises(StateError):
        codec.load_state_dict(state)
    after = codec.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_integer_buffers_are_refused_where_state_is_floating():
    dgc = compressors.get("dgc")
    with pytest.raises(StateError, match="floating"):
        dgc.load_state_dict({"u/w": torch.zeros(4), "v/w": torch.zeros(4, dtype=torch.int64)})
    with pytest.raises(StateError):
        compressors.get("powersgd").load_state_dict({"q/w": torch.zeros(4, 2, dtype=torch.int64)})
    with pytest.raises(StateError, match="floating"):
        compressors.ErrorFeedback(compressors.get("qsgd")).load_state_dict({"ef/w": torch.zeros(4, dtype=torch.int32)})
    with pytest.raises(StateError):
        SketchedSGDWorker().load_state_dict({"u/w": torch.zeros(4), "v/w": torch.zeros(4, dtype=torch.int64)})
    with pytest.raises(StateError):
        SketchedSGDWorker().load_state_dict([1])

"""The ``"dither"`` compile choice's probe (compressors/codecs/rounding.py) times the code that the
choice decides: in compiled mode the compiled rounding pass (and QSGD's bucket-scale kernel), never
the C pass, which runs wherever it applies whatever the choice says (``rounding.rounds_in_c``); in
eager mode neither. A probe of a C width (1 to 8 or 16 bits) times eager code against the C pass and
decides nothing about the compiled pass.

The compiled kernels are replaced by spies that record the call and stop the probe, so nothing
compiles here.
"""

from __future__ import annotations

import pytest
import torch

import gcbench.compressors.codecs.qsgd  # noqa: F401 - registers the quantizers' probes
from gcbench.compressors.codecs import rounding
from gcbench.compressors.kernels import choice, native
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels.quantize import BITS as C_BITS


class Reached(Exception):
    """Raised by a spy: the probe got to a compiled kernel."""


@pytest.fixture
def dither_probe(tmp_path, monkeypatch):
    """The registered ``"dither"`` probe, caught from ``choice.measure`` (nothing timed), on a small
    input."""
    monkeypatch.setenv(choice.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(choice, "PROBE_NUMEL", 1 << 16)
    caught = []

    def measure(probe, forced, repeats=None):
        caught.append(probe)
        return {"eager_s": 1.0, "compiled_s": 1.0, "compiled": False}

    monkeypatch.setattr(choice, "measure", measure)
    choice.forget()
    choice.prefers_compiled("dither", fused.forced)
    choice.forget()
    assert len(caught) == 1
    return caught[0]


@pytest.fixture
def spies(monkeypatch):
    """The compiled kernels the probe can reach, as rounding.py calls them: each call recorded; the
    scale kernel runs its eager function, the rounding kernels stop the probe."""
    seen: list[str] = []

    def scale(*args):
        seen.append("bucket_scale")
        return fused.bucket_scale.fn(*args)

    def stop(name):
        def spy(*args):
            seen.append(name)
            raise Reached(name)
        return spy

    monkeypatch.setattr(rounding, "bucket_scale", scale, raising=False)
    monkeypatch.setattr(rounding, "dither_codes", stop("dither_codes"))
    monkeypatch.setattr(rounding, "dither_planar16", stop("dither_planar16"))
    return seen


def test_probe_width_is_not_a_c_width():
    assert rounding.PROBE_LEVELS >= 1
    bits = (2 * rounding.PROBE_LEVELS).bit_length()
    assert bits not in C_BITS
    assert not rounding.rounds_in_c(choice.PROBE_NUMEL, bits, 128, torch.device("cpu"))


def test_compiled_probe_times_the_compiled_pass_not_the_c_pass(dither_probe, spies):
    with fused.forced("eager"):
        dither_probe("eager")  # builds the probe's input (its 8-bit codes: a C pass), untimed in measure
    c_calls = native.call_count("quantize")
    with fused.forced("compiled"), pytest.raises(Reached):
        dither_probe("compiled")
    assert native.call_count("quantize") == c_calls, "the probe timed the C pass in compiled mode"
    assert spies == ["bucket_scale", "dither_codes"]


def test_eager_probe_runs_no_compiled_kernel_and_no_c_pass(dither_probe, spies):
    with fused.forced("eager"):
        dither_probe("eager")  # builds the probe's input
        c_calls = native.call_count("quantize")
        codes = dither_probe("eager")
    assert native.call_count("quantize") == c_calls and spies == []
    assert codes.dtype == torch.uint8 and codes.numel() > 0

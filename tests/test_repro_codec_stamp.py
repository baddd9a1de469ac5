"""The codecs' stamp on a run's cells: stable where the codecs' bytes are, changed by a one-bit change."""

from __future__ import annotations

import torch

from gcbench import compressors
from gcbench.compressors.codecs import powersgd, qsgd
from gcbench.reproductions.framework import digest
from gcbench.reproductions.framework.codec_stamp import codec_stamp, probe_inputs


def test_the_stamp_is_stable_whatever_the_thread_count():
    before = torch.get_num_threads()
    first = codec_stamp()
    assert len(first) == digest.DIGITS and int(first, 16) >= 0
    torch.set_num_threads(1)
    try:
        assert codec_stamp() == first
    finally:
        torch.set_num_threads(before)
    assert torch.get_num_threads() == before  # the probe's single thread is given back


def test_the_inputs_are_fixed_and_reach_a_sparse_vector_and_a_matrix():
    a, b = probe_inputs(), probe_inputs()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert a["probe.matrix"].shape == (48, 160)
    zeros = (a["probe.vector"] == 0).float().mean().item()
    assert 0.6 < zeros < 0.8


def test_a_codec_not_byte_reproducible_is_left_out():
    assert not compressors.get("sketchml").reproducible  # DataSketches' coins: other bytes each run
    assert codec_stamp(["sketchml"]) == codec_stamp(["sketchml"])


def test_a_gemm_fed_another_operand_layout_changes_the_stamp(monkeypatch):
    # P = M Q as the plain product instead of (Q^T M^T)^T: the same sums, another rounding, so other
    # bytes; a report computed with one layout must not pass for the other's
    stamp = codec_stamp(["powersgd"])
    monkeypatch.setattr(powersgd, "compute_p", lambda m, q: m @ q)
    assert codec_stamp(["powersgd"]) != stamp


def test_one_bit_of_one_codec_changes_the_whole_stamp(monkeypatch):
    before = codec_stamp()
    encode = qsgd.QSGD._encode

    def flipped(self, x, **kw):
        norms, packed = encode(self, x, **kw)
        packed = packed.clone()
        packed[0] ^= 1
        return norms, packed

    monkeypatch.setattr(qsgd.QSGD, "_encode", flipped)
    assert codec_stamp() != before


def test_a_codec_that_raises_does_not_fail_the_probe(monkeypatch):
    def refuse(self, x, **kw):
        raise compressors.UnsupportedInputError("refused")

    before = codec_stamp(["qsgd"])
    monkeypatch.setattr(qsgd.QSGD, "_encode", refuse)
    assert codec_stamp(["qsgd"]) != before

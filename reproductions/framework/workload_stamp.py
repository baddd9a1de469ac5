"""The workload's stamp on a run's cells: a digest of what a paper package's own code computes on a
fixed, synthetic probe, so that a cell computed by models, trainers or time models whose results
have changed since is never reused.

The codecs' stamp (:mod:`.codec_stamp`) covers what every registered codec writes and decodes. A
package adds code of its own around them: its models, its training loop and the way its workers'
payloads are aggregated, its network or time model. A change there alters a cell's numbers without
touching a codec, and a ``CODE_VERSION`` that nobody bumped would let a resumed run, or a report
re-rendered from its cells, keep results of code that is no longer there. Each package's workload
therefore has a ``probe()``: a few steps of its own training functions, the ones its cells call, on
tiny synthetic inputs generated from fixed seeds (no data file is read), yielding ``(label, value)``
items of what those steps computed (parameters' digests, losses, bytes on the wire, modelled seconds;
never a measured time). :func:`workload_stamp` hashes them; the runner (:mod:`.runner`) records the
digest beside the codecs' in every cell's file name, so a one-bit change of a probed result gives
every cell of that paper a new name and the run computes them again.

The probe runs on the CPU on one intra-op thread, with the random generators of torch, NumPy and
Python restored afterwards, so its digest depends neither on the machine's load nor on what ran
before, and the cells computed after it are the ones that would have been computed without it.

What it covers is each package's choice, described in its ``probe.py``; what the cells call that the
probe does not reach (the cells' glue, data loading, what runs only in launched ranks) that module's
``UNPROBED`` names with the reason, and a change there still needs the package's ``CODE_VERSION``.
``tests/test_repro_probe_reach.py`` computes a small scale's cells under a profiler and fails on a
package function a cell calls that is neither reached by the probe nor named there.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any, Iterable

import numpy as np
import torch

from gcbench.compressors.parallel.threads import single_thread

#: Hex digits of the SHA-256 kept.
DIGITS = 16


def _bytes_of(value: Any) -> bytes:
    """The bytes a probe item contributes: a tensor's or array's dtype, shape and raw bytes; a ``bytes``
    as is; anything else as canonical JSON (floats in their shortest exact form)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        return f"{t.dtype}{tuple(t.shape)}".encode() + t.reshape(-1).view(torch.uint8).numpy().tobytes()
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return f"{a.dtype}{a.shape}".encode() + a.tobytes()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def probe_digest(items: Iterable[tuple[str, Any]]) -> str:
    """The digest (:data:`DIGITS` hex digits) of ``(label, value)`` items, in order, each label and value
    length-prefixed (:func:`_bytes_of` says how a value is written)."""
    h = hashlib.sha256()
    for label, value in items:
        data = _bytes_of(value)
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:DIGITS]


def workload_stamp(workload: Any) -> str:
    """The digest of ``workload.probe()``'s items (:func:`probe_digest`), computed on one CPU thread with
    torch's, NumPy's and Python's global random states restored afterwards."""
    py_state = random.getstate()
    np_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]), single_thread(torch.device("cpu")):
        try:
            return probe_digest(workload.probe())
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)

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

import random
from typing import Any

import numpy as np
import torch

from gcbench.compressors.parallel.threads import single_thread

from .digest import probe_digest


def workload_stamp(workload: Any) -> str:
    """The digest of ``workload.probe()``'s items (:func:`~.digest.probe_digest`), computed on one CPU thread with
    torch's, NumPy's and Python's global random states restored afterwards."""
    py_state = random.getstate()
    np_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]), single_thread(torch.device("cpu")):
        try:
            return probe_digest(workload.probe())
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)

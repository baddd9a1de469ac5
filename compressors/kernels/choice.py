"""Eager or compiled, per machine: which of a kernel path's two implementations is faster here.

A compiled kernel is one pass where eager torch makes several, but whether that pass is faster
depends on the machine: its vector ISA (an int64 multiply has a vector instruction on AVX-512, not
on AVX2), its core and thread count, the torch version's code generator. Both implementations give
the same bytes (``tests/test_fused.py``), so the choice is one of speed only and never changes a
payload.

In ``GCBENCH_COMPILE=auto`` mode (:func:`~gcbench.compressors.kernels.core.mode`) a codec asks
:func:`prefers_compiled` for a named path (``"dither"``: QSGD / TernGrad / ZipML's stochastic
rounding where no C pass rounds it, and QSGD's bucket scales; ``"dequantize"``: their decode;
``"sign"``, ``"sign-decode"``: signSGD's scale and decode). The first time on a machine, the path's
probe (registered by the codec module with :func:`register`) runs once per mode on its fixed-size
input (:data:`PROBE_NUMEL` values) to warm up and compile, then :data:`PROBE_REPEATS` times per
mode interleaved; the mode with the lower minimum wins. The result is kept in memory and in a small JSON file
(:func:`cache_path`) under a key of the CPU's flags, torch's thread count and the torch version
(:func:`machine_key`): another process on the same machine reads it instead of measuring again. The
probe's cost is one compilation of the path's kernels (which the compiled mode pays anyway) and
about ``2 * (PROBE_REPEATS + 1)`` calls at :data:`PROBE_NUMEL` values.

``GCBENCH_COMPILE=1`` and ``=0`` bypass the choice (always compiled, always eager). The probes run
on the CPU, so the codecs name a path for CPU tensors only; on another device ``auto`` keeps its
size rule.

What the first run costs (measured: QSGD s = 127 on 25M values, ``GCBENCH_COMPILE=auto``, two
threads, AVX2 dispatch, a 2-core machine under a load of about 6): with empty Inductor and choice
caches, the first encode took 43.2 s (the rounding kernels compiled, the probe measured) and the
first decode 4.6 s (the decode probe), against 132 and 157 ms for the next ones; in a second
process, with both caches on disk, 7.1 s and 0.6 s (Inductor loads its compiled code; no probe).
Choices recorded there: rounding compiled 19.9 ms against eager 229 ms, decode compiled 30.6 ms
against eager 34.8 ms, per 4M-value probe call. On an idle 2-core AVX-512 machine, with empty caches
(``GCBENCH_CACHE_DIR`` a new folder, which also holds Inductor's code: ``core.keep_inductor_cache``):
16.0 s and 2.0 s, then 3.3 s and 0.2 s in a second process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, ContextManager, TypeVar
from pathlib import Path

import torch

T = TypeVar("T")

#: The probe's input size: large enough that per-call overheads do not decide (a fixed cost of
#: ~50 us is 1% of a call), small enough to measure in well under a second per mode.
PROBE_NUMEL = 1 << 22
#: Timed calls per mode (after one untimed call each); the minimum of each is compared.
PROBE_REPEATS = 5
#: Environment variable naming the cache directory (default: ``$XDG_CACHE_HOME/gcbench`` or
#: ``~/.cache/gcbench``).
CACHE_ENV = "GCBENCH_CACHE_DIR"
CACHE_FILE = "compile_choice.json"

_probes: dict[str, Callable[[str], None]] = {}
#: ``(machine_key(), path) -> compiled?``: keyed like the file, so that a change of torch's thread
#: count within a process (a pool that pins one thread) reads or measures its own choice.
_chosen: dict[tuple[str, str], bool] = {}
_lock = threading.Lock()
#: ``owner -> (size, input)``: the probes' inputs (:func:`probe_input`).
_inputs: dict[str, tuple[int, Any]] = {}


def register(path: str, probe: Callable[[str], None]) -> None:
    """Name ``probe`` the measurement of ``path``: ``probe(mode)`` runs the path once on its
    fixed-size input in ``mode`` (``"eager"`` or ``"compiled"``)."""
    _probes[path] = probe


def probe_input(owner: str, build: Callable[[int], T]) -> T:
    """The fixed input of ``owner``'s probes: ``build(PROBE_NUMEL)``, built once and kept while
    :data:`PROBE_NUMEL` stays the same. A change of the size builds it anew, so a probe always times
    as many values as the record it writes says (a smaller input kept from an earlier size would
    record its times as those of :data:`PROBE_NUMEL` values)."""
    n = PROBE_NUMEL
    kept = _inputs.get(owner)
    if kept is None or kept[0] != n:
        kept = _inputs[owner] = (n, build(n))
    return kept[1]


def registered() -> frozenset[str]:
    """The paths that have a probe."""
    return frozenset(_probes)


def cache_path() -> Path:
    """The JSON file holding the measured choices of this user's machines."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gcbench")
    return Path(root) / CACHE_FILE


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> str:
    """The CPU's model and feature flags (``/proc/cpuinfo``), else the platform's description, and
    the vector ISA ATen dispatches to (``ATEN_CPU_CAPABILITY`` can lower it)."""
    text = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features"))]
        text = "".join(sorted(set(lines)))
    except OSError:
        pass
    return f"{text}|{torch.backends.cpu.get_cpu_capability()}"


#: Environment variables that narrow the vector ISA the compiled code uses (torch's kernels, and
#: Inductor's and the C kernels' ``-march``): part of the key when set (even empty), so that a run limited to AVX2
#: on an AVX-512 machine measures its own choices.
ISA_ENVS = ("ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_CPP_MARCH")
#: What the probes measure, in the key: a new number when a probe changes what it times, so that
#: choices measured by an older probe are measured again (2: where C kernels build, the quantizers'
#: rounding to 1, 2, 4, 8 and 16 bits and signSGD's bits and decode are C passes, so ``"dither"``'s
#: probe rounded 3-bit codes, ``"sign"``'s sums the mean-|x| scale's rows and ``"sign-decode"``'s
#: runs the torch decode; 3: a probe's input is always :data:`PROBE_NUMEL` values
#: (:func:`probe_input`), where an input kept from an earlier, smaller size could be timed and
#: recorded as a full probe; 4: the C pass rounds 1 to 8 and 16 bits, so 3-bit codes timed it in
#: compiled mode: ``"dither"``'s probe runs QSGD's bucket scales and 12-bit rounding, which no C
#: pass handles).
PROBES_VERSION = 4


def cpu_key() -> str:
    """``cpu-<digest>``: a digest of the CPU flags (:func:`_cpu_flags`) and of the :data:`ISA_ENVS`
    that are set, which is what code built for this machine depends on."""
    limits = "".join(f"\0{name}={os.environ[name]}" for name in ISA_ENVS if name in os.environ)
    return "cpu-" + hashlib.sha256((_cpu_flags() + limits).encode()).hexdigest()[:16]


def code_key() -> str:
    """What compiled code depends on, readable: ``cpu-<digest>/torch-<version>`` (:func:`cpu_key`)."""
    return f"{cpu_key()}/torch-{torch.__version__}"


def machine_key() -> str:
    """The cache key: :func:`cpu_key`, then torch's thread count and version and
    :data:`PROBES_VERSION`, readable."""
    return f"{cpu_key()}/threads-{torch.get_num_threads()}/torch-{torch.__version__}/probes-{PROBES_VERSION}"


def _load() -> dict:
    try:
        with open(cache_path(), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(key: str, path: str, record: dict) -> None:
    """Merge ``record`` into the file (written to a temporary file, then renamed: a reader never
    sees half a file). A file that cannot be written leaves the choice in memory only."""
    target = cache_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        data = _load()
        data.setdefault(key, {})[path] = record
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".compile_choice.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, target)
    except OSError:
        pass


def measure(probe: Callable[[str], None], forced: Callable[[str], ContextManager], repeats: int | None = None) -> dict:
    """``{"eager_s", "compiled_s", "compiled"}``: the minimum time of ``probe`` per mode over
    ``repeats`` interleaved calls after one untimed call each (the compiled one compiles), each call
    inside ``forced(mode)`` (:func:`~gcbench.compressors.kernels.core.forced`); ``repeats`` defaults
    to :data:`PROBE_REPEATS`. A compiled call that raises (no C++ compiler, a broken toolchain) makes
    the choice eager, with the error under ``"error"`` (:func:`prefers_compiled` keeps such a record
    in memory only)."""
    repeats = PROBE_REPEATS if repeats is None else repeats
    best = {"eager": float("inf"), "compiled": float("inf")}
    for mode in best:
        with forced(mode):
            try:
                probe(mode)
            except Exception as err:  # noqa: BLE001 - compiling failed (no compiler...): eager, not stored
                if mode == "eager":
                    raise
                return {"eager_s": float("nan"), "compiled_s": float("inf"), "compiled": False,
                        "error": f"{type(err).__name__}: {err}"}
    for _ in range(repeats):
        for mode in best:
            with forced(mode):
                start = time.perf_counter()
                probe(mode)
                best[mode] = min(best[mode], time.perf_counter() - start)
    return {"eager_s": best["eager"], "compiled_s": best["compiled"], "compiled": best["compiled"] < best["eager"]}


def prefers_compiled(path: str, forced: Callable[[str], ContextManager]) -> bool:
    """Whether ``path`` runs faster compiled than eager on this machine (module docstring): from
    memory, else from the cache file, else measured now with its registered probe (each call inside
    ``forced(mode)``) and stored. A path without a probe: True (compiled, the default where nothing
    is measured)."""
    if path not in _probes:
        return True
    key = machine_key()
    chosen = _chosen.get((key, path))
    if chosen is not None:
        return chosen
    with _lock:
        if (key, path) in _chosen:
            return _chosen[(key, path)]
        record = _load().get(key, {}).get(path)
        if not isinstance(record, dict) or not isinstance(record.get("compiled"), bool):
            record = measure(_probes[path], forced)
            record["probe_numel"] = PROBE_NUMEL
            if "error" not in record:  # a failed compilation is this process's, not the machine's
                _store(key, path, record)
        _chosen[(key, path)] = record["compiled"]
        return record["compiled"]


def forget() -> None:
    """Drop the in-memory choices (the file stays): the next call reads or measures again."""
    _chosen.clear()

"""Small C kernels for the loops that no tensor library writes well: built on first use, cached on disk.

A few hot paths are sequential byte loops with data-dependent output (3LC's zero-run coding,
:file:`c/zero_run.c`): numpy and torch can only express them as several passes over index arrays,
and Inductor's loops cannot emit a variable number of bytes per input. Their C source ships with
gcbench (``compressors/kernels/c/``); :func:`library` compiles one with the C compiler that
``torch.compile`` needs on the CPU anyway (``$CC``, else ``cc``, ``gcc`` or ``clang``), with
``-O3 -march=native`` (vector code for this machine's ISA, AVX2 or AVX-512 alike; without
``-march=native`` where the compiler refuses it), or ``-march=$TORCHINDUCTOR_CPP_MARCH`` when that
is set, the variable that sets Inductor's target too (``x86-64-v3`` with ``ATEN_CPU_CAPABILITY=avx2``:
every compiled path of an AVX2 machine, on an AVX-512 one), and loads it with :mod:`ctypes` (calls release the
GIL). The shared object is cached in ``native/`` beside the compile choices
(:func:`~gcbench.compressors.kernels.choice.cache_path`'s folder, ``~/.cache/gcbench`` unless
``GCBENCH_CACHE_DIR`` moves it) under a digest of the source, the compiler, its flags and this
machine's CPU flags, written to a temporary file and renamed, so concurrent processes never load
half a file. A build takes about a second, once per machine.

Each kernel has a Python reference (numpy / torch, the same bytes; the tests compare them) that runs
when :func:`use_native` says no: ``GCBENCH_COMPILE=0`` (eager: no compiler needed), or no compiler
could build the source (``auto`` warns once and falls back; ``compiled`` raises).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..parallel.cpu_pool import map_blocks, on_pool_thread
from . import choice, core

R = TypeVar("R")

#: Folder of the C sources, inside the package.
SOURCE_DIR = Path(__file__).with_name("c")
#: Flags of every build; ``-march=native`` (or :data:`MARCH_ENV`'s) is added first and dropped if the
#: compiler refuses it.
CFLAGS = ("-O3", "-std=c11", "-ffp-contract=off", "-shared", "-fPIC")
#: Flags tried first for a kernel whose loop runs on OpenMP threads (:func:`openmp`).
OPENMP_FLAGS = ("-fopenmp",)
#: Environment variable naming the C compiler (the usual one).
CC_ENV = "CC"
#: Environment variable of Inductor's ``-march`` (``torch._inductor.config.cpp.march``), which the C
#: kernels follow too; unset: ``native``; empty: no ``-march`` (the compiler's default target).
MARCH_ENV = "TORCHINDUCTOR_CPP_MARCH"

_lock = threading.Lock()
_libraries: dict[str, ctypes.CDLL | None] = {}
_failures: dict[str, str] = {}
_calls: dict[str, int] = {}
_typed: set[str] = set()
_openmp: dict[str, bool] = {}


class NativeBuildError(RuntimeError):
    """A C kernel could not be built or loaded (no compiler, a compiler error)."""


def compiler() -> str | None:
    """The C compiler's path: ``$CC`` when set, else the first of ``cc``, ``gcc``, ``clang`` on PATH."""
    name = os.environ.get(CC_ENV, "").strip()
    candidates = [name] if name else ["cc", "gcc", "clang"]
    for c in candidates:
        found = shutil.which(c)
        if found:
            return found
    return None


def _compiler_version(cc: str) -> str:
    try:
        run = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
        return run.stdout.splitlines()[0] if run.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _build(name: str) -> Path:
    """Compile ``c/<name>.c`` into the cache (or reuse the cached build); returns the shared object."""
    source = SOURCE_DIR / f"{name}.c"
    # the headers it may include are part of what is built
    text = b"\0".join([source.read_bytes(), *(h.read_bytes() for h in sorted(SOURCE_DIR.glob("*.h")))])
    cc = compiler()
    if cc is None:
        raise NativeBuildError(f"no C compiler found (set {CC_ENV}, or install cc, gcc or clang)")
    version = _compiler_version(cc)
    folder = choice.cache_path().parent / "native"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir()) / "gcbench-native"
        folder.mkdir(parents=True, exist_ok=True)
    errors = []
    march = os.environ.get(MARCH_ENV)
    if march is None:
        march = "native"
    # as Inductor: unset is native, an empty value is no -march at all (the compiler's default)
    marches = dict.fromkeys(((f"-march={march.strip()}",) if march.strip() else (), ()))
    # a kernel that splits its loop over threads (c/parallel.h) is built with OpenMP where the compiler can
    threads = (OPENMP_FLAGS, ()) if b'#include "parallel.h"' in text else ((),)
    for extra in (m + t for m in marches for t in threads):
        flags = (*CFLAGS, *extra)
        key = hashlib.sha256(b"\0".join([text, cc.encode(), version.encode(), " ".join(flags).encode(),
                                         choice.cpu_key().encode()])).hexdigest()[:20]
        target = folder / f"{name}-{key}.so"
        if target.exists():
            return target
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-", suffix=".so")
        os.close(fd)
        try:
            run = subprocess.run([cc, *flags, str(source), "-o", tmp], capture_output=True, text=True, timeout=300,
                                 check=False)
            if run.returncode == 0:
                os.replace(tmp, target)
                return target
            errors.append(f"{cc} {' '.join(flags)}: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}")
        except (OSError, subprocess.SubprocessError) as err:
            errors.append(f"{cc}: {err}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise NativeBuildError(f"building {source.name} failed: {'; '.join(errors)}")


def library(name: str) -> ctypes.CDLL | None:
    """The loaded C kernels of ``c/<name>.c`` (built on first use), or None when they cannot be
    built here (:func:`failure` says why). Once per process; thread-safe."""
    with _lock:
        if name not in _libraries:
            try:
                _libraries[name] = ctypes.CDLL(str(_build(name)))
            except (NativeBuildError, OSError) as err:
                _libraries[name] = None
                _failures[name] = str(err)
        return _libraries[name]


def typed(name: str, signatures: Mapping[str, tuple[Sequence[Any], Any]]) -> ctypes.CDLL:
    """The loaded C kernels of ``c/<name>.c`` (:func:`library`) with the ctypes ``(argtypes,
    restype)`` of each function in ``signatures`` declared (once per process).

    Raises:
        NativeBuildError: the kernels cannot be built or loaded here (:func:`failure` says why).
    """
    lib = library(name)
    if lib is None:
        raise NativeBuildError(failure(name) or f"{name}.c: not built")
    if name in _typed:  # the per-call path: no lock once declared
        return lib
    with _lock:
        if name not in _typed:
            for fn, (argtypes, restype) in signatures.items():
                getattr(lib, fn).argtypes = list(argtypes)
                getattr(lib, fn).restype = restype
            _typed.add(name)
    return lib


def openmp(name: str) -> bool:
    """Whether the loaded ``c/<name>.c`` was built with OpenMP (:file:`c/parallel.h`): one call then
    runs its blocks on the caller's OpenMP threads, torch's own team (:func:`in_blocks`)."""
    known = _openmp.get(name)
    if known is None:
        lib = library(name)
        known = _openmp[name] = lib is not None and hasattr(lib, "gcbench_openmp") and bool(lib.gcbench_openmp())
    return known


def in_blocks(
    name: str, call: Callable[[int, int, int, int], R], start: int, end: int, block: int, device: torch.device,
    workers: int,
) -> list[R]:
    """Run a kernel of ``c/<name>.c`` that takes ``(start, end, block, threads)`` over ``[start,
    end)`` in blocks of ``block`` units on up to ``workers`` threads; returns what its calls returned.

    Built with OpenMP (:func:`openmp`): one call, its blocks on ``workers`` OpenMP threads. Without:
    a call per block, shared between this thread and pool threads
    (:func:`~gcbench.compressors.parallel.cpu_pool.map_blocks`). On one of those pool threads (a stage
    already split over threads) or with one worker: one thread. The blocks write disjoint outputs, so
    the result is the same either way."""
    threads = 1 if workers <= 1 or on_pool_thread() else workers
    if openmp(name):
        return [call(start, end, block, threads)]
    blocks = [(a, min(end, a + block)) for a in range(start, end, block)]
    return map_blocks(lambda b: call(b[0], b[1], block, 1), blocks, device, threads)


def record_call(name: str) -> None:
    """Count one call of a kernel of ``c/<name>.c`` (its wrapper calls this): :func:`call_count`."""
    _calls[name] = _calls.get(name, 0) + 1


def call_count(name: str | None = None) -> int:
    """Calls of the C kernels of ``name`` (None: all) so far in this process: tells whether a codec
    used them."""
    return sum(_calls.values()) if name is None else _calls.get(name, 0)


def failure(name: str) -> str | None:
    """Why ``c/<name>.c`` could not be built or loaded in this process, or None."""
    return _failures.get(name)


def use_native(name: str) -> bool:
    """Whether the C kernels of ``name`` run, in the current mode (:func:`~gcbench.compressors.kernels.core.mode`):
    not in ``eager``; in ``auto`` where they build (else a warning, once, and the Python reference);
    in ``compiled`` they must build.

    Raises:
        NativeBuildError: ``compiled`` mode and the kernels cannot be built here.
    """
    m = core.mode()
    if m == "eager":
        return False
    known = name in _libraries
    lib = library(name)
    if lib is not None:
        return True
    if m == "compiled":
        raise NativeBuildError(failure(name) or f"{name}: not built")
    if not known:
        warnings.warn(f"gcbench: the C kernels {name}.c could not be built ({failure(name)}); running the Python "
                      "reference (the same bytes, slower). Set GCBENCH_COMPILE=0 to skip building.",
                      RuntimeWarning, stacklevel=3)
    return False

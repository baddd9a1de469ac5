"""What ``gcbench gpu-check`` ran on: devices, driver, torch, Triton, NCCL, the CPU, the packages."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import torch

from ... import __version__

#: Packages whose presence changes what the check can do (optional ones included).
PACKAGES = ("torch", "torchvision", "triton", "numpy", "datasketches", "datasets", "asv", "asv-runner", "wandb",
            "scikit-learn", "sacrebleu", "pyarrow", "pytest", "hypothesis", "rich", "typer", "matplotlib")


def nvidia_smi() -> dict[str, Any] | None:
    """Driver version, GPU names and memory as ``nvidia-smi`` reports them (None without it)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = "driver_version,name,memory.total,clocks.max.sm,clocks.max.mem"
    try:
        proc = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"error": f"{type(err).__name__}: {err}"}
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip()[:500]}
    gpus = [dict(zip(query.split(","), (c.strip() for c in line.split(",")))) for line in proc.stdout.strip().splitlines()]
    return {"driver_version": gpus[0]["driver_version"] if gpus else None, "gpus": gpus}


def cuda_devices() -> list[dict[str, Any]]:
    """Every CUDA device torch sees: name, compute capability, memory, multiprocessors."""
    out = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                    "memory_GiB": round(p.total_memory / 2**30, 1), "multiprocessors": p.multi_processor_count})
    return out


def commit() -> dict[str, Any]:
    """The gcbench commit: ``$GCBENCH_COMMIT`` when set (the caller names what a copied tree holds: a
    GPU machine may get the tree without its history, or with a ``.git`` older than the files), else
    git's when this is a checkout, else unknown. Git's view is kept beside a given commit."""
    from ...reproductions.framework.report import git_info

    info = git_info()
    given = os.environ.get("GCBENCH_COMMIT", "").strip()
    if given:
        return {"commit": given, "dirty": None, "source": "GCBENCH_COMMIT",
                **({"git": info} if info.get("commit") else {})}
    if info.get("commit"):
        return {**info, "source": "git"}
    return {"commit": None, "dirty": None, "source": "unknown"}


def environment() -> dict[str, Any]:
    """The environment section of the check's JSON."""
    from ...reproductions.framework.report import machine_info, package_versions

    cuda = torch.cuda.is_available()
    packages = package_versions(PACKAGES)
    nccl = None
    if cuda:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - a build without NCCL
            nccl = None
    return {
        "gcbench": __version__,
        "commit": commit(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl,
        "triton": packages["triton"],
        "cuda_available": cuda,
        "devices": cuda_devices(),
        "nvidia_smi": nvidia_smi(),
        "machine": machine_info(),
        "packages": packages,
    }


def summary_line(env: dict[str, Any]) -> str:
    """One line: device(s), driver, torch, Triton, CPU."""
    devs = ", ".join(f"{d['name']} (sm {d['capability']}, {d['memory_GiB']} GiB)" for d in env["devices"]) or "no CUDA device"
    smi = env.get("nvidia_smi") or {}
    mach = env.get("machine") or {}
    return (f"{devs}; driver {smi.get('driver_version') or 'unknown'}; torch {env['torch']} (CUDA {env['torch_cuda']}, "
            f"NCCL {env['nccl']}), Triton {env['triton']}; CPU {mach.get('cpu_model')} x {mach.get('cpu_count')}")

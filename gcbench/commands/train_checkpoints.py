"""Checkpoints of ``gcbench train`` runs (:mod:`gcbench.commands.train`): writing them, reading them back, and
what a run refuses before it starts.

Layout: ``<dir>/step<N>/rank<r>.pt`` per rank and checkpointed step (``N`` zero-padded to 8 digits),
and ``<dir>/latest``, a short text file naming the newest complete step folder. Each ``rank<r>.pt``
holds only tensors and plain values (dicts, lists, numbers, strings), so it is read with
``torch.load(weights_only=True)``: a file holding anything else is refused, never executed.

Before a run starts (:func:`check_checkpoint_dir`, in the launching process, before any rank):

* the folder must be a folder (or not exist yet, under a folder that does);
* without ``resume`` it must hold no checkpoints of another run (a ``latest`` pointer or a step folder),
  which the new run would otherwise overwrite;
* with ``resume`` its ``latest`` pointer must name a step folder inside it, and every rank's file
  there must be a readable checkpoint written by a run with the same settings.

Every refusal is a :class:`CheckpointError` whose one-line message names the file or folder.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

import torch

from ..compressors.errors import GCBenchError
from ..data.files import nearest_existing, unexaminable
from .options import folder_write_problem

#: ``latest`` holds at most this many bytes (a step folder's name).
POINTER_MAX_BYTES = 64
STEP_FOLDER = re.compile(r"step[0-9]{8,12}")
#: What every rank's checkpoint holds (``scaler`` may be None).
KEYS = ("step", "config", "model", "optimizer", "hook", "traffic", "losses", "scaler")


class CheckpointError(GCBenchError, ValueError):
    """A checkpoint folder, ``latest`` pointer or rank file that a run cannot use; the message names it."""


def step_folder(root: Path, step: int) -> Path:
    """The folder of the checkpoint taken after ``step`` steps."""
    return root / f"step{step:08d}"


def holds_checkpoints(root: Path) -> bool:
    """Whether ``root`` holds a ``latest`` pointer or a step folder."""
    if not root.is_dir():
        return False
    return (root / "latest").exists() or any(STEP_FOLDER.fullmatch(p.name) for p in root.iterdir())


def latest(root: Path) -> Path | None:
    """The step folder ``root/latest`` names (None when there is no pointer yet).

    Raises:
        CheckpointError: the pointer is not a short text naming an existing step folder inside ``root``.
    """
    pointer = root / "latest"
    if not pointer.exists() and not pointer.is_symlink():
        return None
    if not pointer.is_file():
        raise CheckpointError(f"{pointer} is not a file; it should hold the name of a step folder of {root}")
    with open(pointer, "rb") as f:
        raw = f.read(POINTER_MAX_BYTES + 1)
    try:
        name = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        name = None
    if len(raw) > POINTER_MAX_BYTES or name is None or not STEP_FOLDER.fullmatch(name):
        shown = repr(raw[:40]) + ("..." if len(raw) > 40 else "")
        raise CheckpointError(f"{pointer} does not name a step folder of {root} (stepNNNNNNNN), it holds {shown}")
    folder = root / name
    if not folder.is_dir():
        raise CheckpointError(f"{pointer} names {name}, which is not a folder in {root}")
    return folder


def load_rank(path: Path, map_location: Any = "cpu", *, mmap: bool = False) -> dict[str, Any]:
    """Read one rank's checkpoint (tensors and plain values only). ``mmap``: map the tensors' bytes
    from the file instead of reading them, so that only what is used is read (the launching
    process's check, which loads the weights alone).

    Raises:
        CheckpointError: the file is missing, damaged, holds other objects or is not a rank checkpoint.
    """
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} is missing")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. about the pickle protocol: the error below says it all
            blob = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - torch raises many kinds (zip reader, unpickler, EOF)
        if type(err).__name__ == "UnpicklingError":
            why = "it holds objects other than tensors and plain values, or is damaged"
        else:
            text = str(err).strip().splitlines()[0].split(". ")[0][:120] if str(err).strip() else ""
            why = f"truncated or damaged ({type(err).__name__}{': ' + text if text else ''})"
        raise CheckpointError(f"checkpoint {path} cannot be read: {why}") from None
    missing = [k for k in KEYS if not isinstance(blob, Mapping) or k not in blob]
    if missing:
        raise CheckpointError(f"checkpoint {path} is not a gcbench train checkpoint (missing {', '.join(missing)})")
    if not isinstance(blob["step"], int) or not isinstance(blob["config"], Mapping) or not isinstance(blob["losses"], list):
        raise CheckpointError(f"checkpoint {path} is not a gcbench train checkpoint (malformed step, config or losses)")
    return dict(blob)


def check_compatible(saved: Mapping[str, Any], cfg: Any, names: Sequence[str], path: Path | None = None) -> None:
    """Refuse a checkpoint whose run had other settings (``names``: the fields of ``cfg`` that must agree)."""
    now = asdict(cfg)
    defaults = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(cfg)}  # type: ignore[misc]
    # a field missing from an older checkpoint had its default then
    was = {k: saved.get(k, defaults[k]) for k in names}
    diff = {k: (was[k], now[k]) for k in names if was[k] != now[k]}
    if diff:
        where = f" {path}" if path is not None else ""
        raise CheckpointError(f"checkpoint{where} was written by a run with other settings: {diff}")


def check_checkpoint_dir(cfg: Any, names: Sequence[str], model: torch.nn.Module | None = None) -> None:
    """Everything about ``cfg.checkpoint_dir`` that can be checked before a run starts (module docstring).

    ``model``: a freshly built model of the run, to check that the checkpoints' weights fit it.
    """
    if not cfg.checkpoint_dir or not (cfg.checkpoint_every or cfg.resume):
        return
    root = Path(cfg.checkpoint_dir)
    try:
        found = nearest_existing(root.absolute())
    except OSError as err:
        raise CheckpointError(f"checkpoint folder {root}: {unexaminable(err)}") from None
    if found != root.absolute():  # not there yet: made under the nearest folder that exists
        if found is None or not found.is_dir():
            raise CheckpointError(f"checkpoint folder {root} cannot be created: {found} is not a writable folder")
        why = folder_write_problem(found)  # tried, not read from permission bits (see folder_write_problem)
        if why:
            raise CheckpointError(f"checkpoint folder {root} cannot be created in {found} ({why})")
        return
    if not root.is_dir():
        raise CheckpointError(f"checkpoint folder {root} is a file, not a folder")
    if cfg.checkpoint_every and folder_write_problem(root):
        raise CheckpointError(f"checkpoint folder {root} is not writable")
    if not cfg.resume:
        if holds_checkpoints(root):
            raise CheckpointError(f"checkpoint folder {root} holds the checkpoints of a run; pass --resume to continue it "
                                  "or choose another folder")
        return
    folder = latest(root)
    if folder is None:
        return
    for rank in range(cfg.nproc):
        path = folder / f"rank{rank}.pt"
        ck = load_rank(path, mmap=True)  # the optimizer's and the hook's tensors are not read here
        check_compatible(ck["config"], cfg, names, path)
        if ck["step"] != int(folder.name[4:]):
            raise CheckpointError(f"checkpoint {path} holds step {ck['step']}, not the step of its folder")
        if model is not None:
            try:
                model.load_state_dict(ck["model"])
            except Exception as err:  # noqa: BLE001 - shapes or names that do not fit the model
                raise CheckpointError(f"checkpoint {path}: its weights do not fit the {cfg.model} model "
                                      f"({str(err).strip().splitlines()[0][:120]})") from None


def save(cfg: Any, rank: int, step: int, model: torch.nn.Module, opt: Any, state: Any, traffic: Any,
         losses: Sequence[float], scaler: Any = None) -> None:
    """Write this rank's checkpoint after ``step`` steps; rank 0 then moves ``latest`` to it once every rank's
    file is complete (a collective barrier)."""
    import torch.distributed as dist

    root = Path(cfg.checkpoint_dir)
    folder = step_folder(root, step)
    folder.mkdir(parents=True, exist_ok=True)
    blob = {
        "step": step,
        "config": asdict(cfg),
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "hook": state.state_dict(),
        "traffic": traffic.to_dict(),
        "losses": list(losses),
        "scaler": scaler.state_dict() if scaler is not None else None,
    }
    tmp = folder / f"rank{rank}.pt.tmp"
    torch.save(blob, tmp)
    os.replace(tmp, folder / f"rank{rank}.pt")
    dist.barrier()  # every rank's file is complete before the pointer moves
    if rank == 0:
        ptr = root / "latest.tmp"
        ptr.write_text(folder.name)
        os.replace(ptr, root / "latest")

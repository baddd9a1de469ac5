"""Weights & Biases logging for reproductions: offline by default, never needs an account or network.

Every computed cell is one W&B run in project ``gcbench`` under ``<out_dir>/wandb/``. The mode is
``$WANDB_MODE`` when the user set it (``online`` syncs live, ``disabled`` turns logging off), else
``offline``: runs are written locally and can be uploaded later with ``wandb sync <dir>``.
Config carries method, codec parameters, workers, topology, profile, scale, seed and data set; the
tags repeat the main ones for filtering. Metrics per epoch: loss, metric (accuracy), bytes sent,
compression ratio, measured and modelled time.

Tracking must never break a reproduction: if wandb is missing or ``init`` fails (e.g. ``online``
without credentials) a warning is printed once and the run continues untracked.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

DEFAULT_PROJECT = "gcbench"


def wandb_mode() -> str:
    """``$WANDB_MODE`` if set, else ``"offline"``."""
    return os.environ.get("WANDB_MODE") or "offline"


class TrackedRun:
    """One W&B run (or a no-op stand-in when tracking is off)."""

    def __init__(self, run: Any | None):
        self._run = run

    @property
    def active(self) -> bool:
        """True when metrics go to a real W&B run."""
        return self._run is not None

    @property
    def dir(self) -> str | None:
        """The run's local folder (offline runs: ``.../wandb/offline-run-*``)."""
        return getattr(self._run, "dir", None) if self._run is not None else None

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log one step's metrics (numbers only; None values are dropped)."""
        if self._run is None:
            return
        clean = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._run.log(clean, step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        """Set summary values shown in the run table."""
        if self._run is None:
            return
        for k, v in values.items():
            self._run.summary[k] = v

    def finish(self) -> None:
        """Close the run (flushes offline files)."""
        if self._run is not None:
            self._run.finish()
            self._run = None

    def __enter__(self) -> "TrackedRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finish()


class Tracker:
    """Creates one :class:`TrackedRun` per computed cell.

    Args:
        out_dir: the run's output folder; W&B writes ``out_dir/wandb/``.
        enabled: False turns tracking off entirely (also ``WANDB_MODE=disabled``).
        project: W&B project name.
    """

    def __init__(self, out_dir: str | os.PathLike, *, enabled: bool = True, project: str = DEFAULT_PROJECT):
        self.out_dir = Path(out_dir)
        self.mode = wandb_mode()
        self.enabled = enabled and self.mode != "disabled"
        self.project = project
        self.init_seconds: list[float] = []
        self._warned = False

    def start(self, name: str, config: Mapping[str, Any], tags: Sequence[str] = (), group: str | None = None) -> TrackedRun:
        """Start a run named ``name`` (a no-op run when tracking is off or fails)."""
        if not self.enabled:
            return TrackedRun(None)
        try:
            import wandb

            self.out_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            run = wandb.init(
                project=self.project,
                dir=str(self.out_dir),
                name=name,
                group=group,
                config=dict(config),
                tags=[str(t)[:64] for t in tags],
                mode=self.mode,  # type: ignore[arg-type]
                reinit="finish_previous",
                settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True,
                                        disable_job_creation=True, save_code=False),
            )
            self.init_seconds.append(time.perf_counter() - t0)
            return TrackedRun(run)
        except Exception as err:  # noqa: BLE001 - tracking must never stop a reproduction
            if not self._warned:
                warnings.warn(f"W&B tracking disabled for this run ({type(err).__name__}: {err})", RuntimeWarning, stacklevel=2)
                self._warned = True
            self.enabled = False
            return TrackedRun(None)

    def info(self) -> dict[str, Any]:
        """What the report says about tracking."""
        return {
            "mode": self.mode if self.enabled or self.init_seconds else "disabled",
            "dir": str(self.out_dir / "wandb"),
            "runs": len(self.init_seconds),
            "init_seconds_total": round(sum(self.init_seconds), 3),
        }

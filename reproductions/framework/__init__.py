"""The reproduction framework every paper package uses.

* :mod:`.spec`: TOML specs (paper values with sources, workload, scale presets, claims), validated.
* :mod:`.cells`: cells cached as JSON, written atomically, so an interrupted run resumes.
* :mod:`.claims`: claim evaluation (reproduced / within tolerance / differs / not run at this scale).
* :mod:`.report`: results JSON, Markdown report, PNG plots, environment capture.
* :mod:`.tracking`: Weights & Biases, offline unless ``WANDB_MODE`` says otherwise.
* :mod:`.progress`: the rich progress display.
* :mod:`.runner`: plan -> run/resume cells -> derive -> claims -> report.
"""

"""The reproduction framework every paper package uses.

* :mod:`.spec`: TOML specs (paper values with sources, workload, scale presets, claims), validated.
* :mod:`.cells`: cells cached as JSON, written atomically, so an interrupted run resumes.
* :mod:`.claims`: claim evaluation (reproduced / within tolerance / differs / not at this scale / not run).
* :mod:`.report`: results JSON, Markdown report, PNG plots, environment capture.
* :mod:`.tracking`: Weights & Biases, offline unless ``WANDB_MODE`` says otherwise.
* :mod:`.progress`: the rich progress display.
* :mod:`.runner`: plan -> run/resume cells -> derive -> claims -> report.
* :mod:`.settling`: whether a run's training has settled enough to test a claim about its final metric.
* :mod:`.published`: committed reports (``reproductions/<paper>/results/<scale>/``): reading, publishing a run.
* :mod:`.fingerprint`: a claim's definition fingerprint, recorded in ``results.json`` to tell a changed claim.
* :mod:`.results_table`: the table of every paper's headline claims (``RESULTS.md``, README's block).
"""

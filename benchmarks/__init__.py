"""gcbench's speed benchmarks: an asv suite (``asv.conf.json`` points here) and a quick
pytest-benchmark check.

* ``bench_codecs.py``    every registered codec (generated from the registry): encode/decode time,
  peak memory, bits per element, relative error; dense input, sparse input for SketchML.
* ``bench_baselines.py`` same-run baselines: ``dst.copy_(x)``, ``x.clone()``, fp16 cast.
* ``bench_stages.py``    the stages the seed codecs expose (SketchML, 3LC, Count Sketch).
* ``bench_peers.py``     torch's PowerSGD hook math, DataSketches, hivemind (when installed).
* ``bench_text.py``      text preparation with and without the ``Dataset.map`` caches, as ratios.
* ``test_quick_codecs.py`` pytest-benchmark view (``tox -e bench-quick``); not in the unit tests.
* ``common.py``          sizes (1M; 25M with ``GCBENCH_BENCH_FULL=1``), devices, inputs, skips.
* ``memory.py``          encode peak memory as a multiple of the input (``bench_codecs`` tracks it).

Helper scripts, run alone (``python -m benchmarks.NAME``), not asv suites:

* ``countsketch_floor.py`` Count Sketch accumulate against the floor of ``index_add_``.
* ``hook_overhead.py``   the DDP hook's fixed cost per step on a small model, against torch's hooks.
* ``sketchml_gil.py``    whether DataSketches' quantile-sketch ``update`` releases the GIL.

This folder is not installed with the package: asv and pytest import it from the repository.
"""

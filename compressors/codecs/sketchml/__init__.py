"""SketchML (Jiang et al., SIGMOD 2018): the codec, its quantile feed and splits, bucket groups, MinMaxSketch and delta-binary keys."""

"""Paper reproductions (SketchML, Sketched-SGD, 3LC, L-GreCo) built on one set of codecs."""

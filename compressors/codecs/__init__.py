"""The codecs: one module per codec; SketchML, Count Sketch and 3LC are packages holding their helpers."""

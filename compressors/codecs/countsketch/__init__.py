"""Count Sketch: the sketch and codec, its hashes and the exact arithmetic modulo 2^61 - 1 they use."""

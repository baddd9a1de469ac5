"""Compiled (torch.compile) kernels of the codecs, with eager references, the counter-based dither hash, and profiler labels for their stages."""

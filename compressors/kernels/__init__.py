"""Compiled (torch.compile) kernels of the codecs, with eager references, and the counter-based dither hash."""

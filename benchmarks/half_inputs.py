"""16-bit inputs: each codec's encode and decode of float16 or bfloat16 values beside the same float32 input.

``gcbench bench`` and its targets time float32 input. A model trained in float16 or bfloat16 hands the
codecs 16-bit gradients (DDP's buckets have the parameters' dtype), which the codecs quantize in
float32: the quantizers widen the input into a per-thread buffer, a 16-bit payload decoded into
``out`` goes through a per-thread float32 buffer, and error feedback widens its input and its decode
in buffers of its own (:mod:`gcbench.compressors.kernels.workspace`, ``WORKING_COPY_MAX_BYTES``).
This prints, in interleaved rounds, ``copy_`` of the float32 input into a ready buffer (the baseline)
and, for each codec and dtype, ``encode`` and ``decode(payload, out=buf)`` as multiples of it; error
feedback codecs encode under one key, so their rows include the residual's update. The exact TopK on
16-bit values often meets ties at its k-th magnitude and then runs ``torch.topk`` of the whole tensor
(the codec's contract), which its rows show. A name ending in ``+ef`` wraps the codec in error feedback
(``ErrorFeedback``), whose generic steps keep their working tensors in per-thread buffers from
``NEW_PAGES_MIN_BYTES`` (32 MiB) on: compare ``n`` = 2^22 and 2^23.

Run: ``python -m benchmarks.half_inputs [n] [rounds] [codec ...]`` (defaults 2^23 values, 7 rounds,
signsgd ef-signsgd qsgd zipml8 terngrad 3lc topk), e.g. ``python -m benchmarks.half_inputs 8388608 7
topk+ef randomk+ef qsgd+ef``.
"""

from __future__ import annotations

import os
import sys

#: The codecs timed when none is named.
DEFAULT_CODECS = ("signsgd", "ef-signsgd", "qsgd", "zipml8", "terngrad", "3lc", "topk")


def main(n: int = 1 << 23, rounds: int = 7, codecs: tuple[str, ...] = DEFAULT_CODECS) -> None:
    """Print the table described in the module docstring."""
    import torch

    from gcbench import compressors
    from gcbench.bench.rounds import interleaved
    from gcbench.compressors import ErrorFeedback

    x = torch.randn(n, generator=torch.Generator().manual_seed(0))
    dst = torch.empty_like(x)
    fns = {"copy_ (float32)": lambda: dst.copy_(x)}
    for name in codecs:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            codec = compressors.get(name.removesuffix("+ef"))
            if name.endswith("+ef") and not isinstance(codec, ErrorFeedback):
                codec = ErrorFeedback(codec)
            xt = x.to(dtype)
            payload = codec.encode(xt, key="k")
            out = torch.empty_like(xt)
            label = f"{name} {str(dtype).removeprefix('torch.')}"
            fns[f"{label} encode"] = lambda c=codec, v=xt: c.encode(v, key="k")
            fns[f"{label} decode"] = lambda c=codec, p=payload, o=out: c.decode(p, out=o)
    timings = interleaved(fns, repeat=rounds, warmup=1, device="cpu")
    base = timings["copy_ (float32)"].median_s
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"n = {n}, {torch.get_num_threads()} torch threads, {rounds} rounds; load average {load}")
    for k, t in timings.items():
        print(f"{k:32s} median {t.median_s * 1e3:8.2f} ms {t.median_s / base:7.2f}x copy_")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 1 << 23, int(args[1]) if len(args) > 1 else 7, tuple(args[2:]) or DEFAULT_CODECS)

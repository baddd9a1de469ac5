"""``gcbench gpu-check``'s bench part: ``gcbench bench`` in every mode (eager, compiled and ``auto``, the
default) for every codec on one device,
one codec at a time in a child process that writes its JSON after each codec (so a budget cut or a
hung kernel loses one codec, not the table), then each row as effective GB/s and % of ``copy_``.
Every codec is measured in eager mode first, then in every mode as the budget allows (see :func:`main`),
then profiled (:func:`profile_codec`) while time is left.

Effective bandwidth counts the bytes a row's calls really read and write: an encode reads its input
(4 bytes per float32 element; 12 per key-value pair of a sparse COO input: int64 key + float32
value) and writes the payload (``nbytes``); a decode reads the payload and writes the input's size.
``copy_`` reads and writes the input once (8 bytes per element), so a codec at 2x ``copy_`` whose
payload is a quarter of its input runs at about 62% of ``copy_``'s bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .boxed import run_boxed

#: Bytes per key-value pair of the sparse COO input (int64 key + float32 value).
PAIR_BYTES = 12
#: Rows of these kinds get bandwidth columns (baselines are the reference; peers have their own footing).
MEASURED_KINDS = ("codec", "raw", "stage")


def bandwidth(row: dict[str, Any], copy_bytes: int) -> dict[str, float | None]:
    """Effective GB/s of the row's encode, decode and both, and % of its own ``copy_``'s bandwidth."""
    enc = (row.get("encode") or {}).get("median_s")
    dec = (row.get("decode") or {}).get("median_s")
    copy_s = row.get("copy_s")
    pairs = row.get("pairs")
    in_bytes = pairs * PAIR_BYTES if pairs else 4 * int(row.get("numel") or 0)
    payload = int(row.get("nbytes") or 0)
    out: dict[str, float | None] = {"enc_GBps": None, "dec_GBps": None, "total_GBps": None, "copy_GBps": None,
                                    "pct_of_copy": None}
    if copy_s:
        out["copy_GBps"] = copy_bytes / copy_s / 1e9
    if enc:
        out["enc_GBps"] = (in_bytes + payload) / enc / 1e9
    if dec:
        out["dec_GBps"] = (payload + in_bytes) / dec / 1e9
    if enc and dec:
        out["total_GBps"] = 2 * (in_bytes + payload) / (enc + dec) / 1e9
    best = out["total_GBps"] if out["total_GBps"] is not None else out["enc_GBps"]
    if best is not None and out["copy_GBps"]:
        out["pct_of_copy"] = 100.0 * best / out["copy_GBps"]
    return out


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """Add the bandwidth columns to every measured row and count verdicts and failures."""
    size = int(doc.get("meta", {}).get("size") or 0)
    rows = doc.get("rows", [])
    for r in rows:
        if r.get("kind") in MEASURED_KINDS and r.get("status") == "ok":
            r["bandwidth"] = bandwidth(r, 8 * size)
    verdicts = [r.get("verdict") for r in rows if r.get("verdict")]
    return {
        "codecs_done": doc.get("done", []),
        "codecs_skipped": doc.get("skipped", []),
        "compiled_not_measured": doc.get("compiled_skipped", []),
        "rows": len(rows),
        "met": verdicts.count("met"),
        "not_met": verdicts.count("not met"),
        # per mode: "auto" is what runs by default
        "verdicts_by_mode": {m: {"met": sum(1 for r in rows if r.get("mode") == m and r.get("verdict") == "met"),
                                 "not_met": sum(1 for r in rows if r.get("mode") == m and r.get("verdict") == "not met")}
                             for m in sorted({r.get("mode") for r in rows if r.get("verdict")}, key=str)},
        "failed_rows": [f"{r['name']} [{r.get('mode')}]: {r.get('error')}" for r in rows if r.get("status") == "failed"],
    }


#: CUDA runtime and driver calls (the profiler's CPU-side events) that launch a kernel.
LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                          "cudaLaunchCooperativeKernel", "cudaGraphLaunch"})
#: Calls that make the host wait for the device: an explicit synchronisation, or a blocking copy.
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                        "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2"})


def host_calls(cpu_names: list[str], device_names: list[str]) -> dict[str, int]:
    """What one call asked of the host: kernel launches and synchronisations (by the CPU-side CUDA calls'
    names, :data:`LAUNCH_CALLS` and :data:`SYNC_CALLS`) and copies to the host (device events named
    ``Memcpy DtoH``). Each synchronisation stalls the launch queue; a call that must stay under 2x a
    ``copy_`` has room for none."""
    return {"launches": sum(n in LAUNCH_CALLS for n in cpu_names),
            "syncs": sum(n in SYNC_CALLS for n in cpu_names),
            "copies_to_host": sum("DtoH" in n for n in device_names)}


def profile_codec(name: str, size: int, device: str, *, top: int = 5) -> dict[str, Any]:
    """One default-mode encode and decode of codec ``name`` at ``size`` elements under
    ``torch.profiler``, after a warm-up call: the device's kernels (CUDA) or the CPU's operators
    (elsewhere), how many ran, their summed time, the wall time, and the ``top`` of them by time. Many
    short kernels whose sum is far below the wall time mean the row is bound by launches and Python,
    not by memory traffic."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from ... import compressors
    from ...bench.harness import DEFAULT_DENSITY
    from ...bench.inputs import make_dense_input, make_sparse_input

    codec = compressors.get(name)
    sparse = getattr(codec, "sparse_native", False)
    x = make_sparse_input(size, DEFAULT_DENSITY, device) if sparse else make_dense_input(size, device)
    cuda = torch.device(device).type == "cuda"

    def once() -> None:
        codec.decode(codec.encode(x, key="profile"))
        if cuda:
            torch.cuda.synchronize()

    once()  # compiles, fills caches
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        once()
        wall_s = time.perf_counter() - t0
    totals: dict[str, float] = {}
    count = 0
    calls: dict[str, int] | None = None
    if cuda:
        cpu_names, device_names = [], []
        for e in prof.events():
            if getattr(e, "device_type", None) == DeviceType.CUDA:
                count += 1
                totals[e.name] = totals.get(e.name, 0.0) + e.time_range.elapsed_us()
                device_names.append(e.name)
            else:
                cpu_names.append(e.name)
        calls = host_calls(cpu_names, device_names)
    else:
        for e in prof.key_averages():
            if e.key.startswith("aten::"):
                count += e.count
                totals[e.key] = totals.get(e.key, 0.0) + e.self_cpu_time_total
    busy_us = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    return {"what": "CUDA kernels" if cuda else "aten operators (self CPU time)", "count": count,
            "busy_ms": round(busy_us / 1e3, 3), "wall_ms": round(wall_s * 1e3, 3), **(calls or {}),
            "top": [{"name": n[:120], "ms": round(us / 1e3, 3), "share": round(us / busy_us, 3) if busy_us else None}
                    for n, us in ranked]}


def run(out: Path, *, device: str, size: int, seconds: float, repeat: int = 5, codecs: list[str] | None = None,
        grace_s: float = 20.0) -> dict[str, Any]:
    """Run the child for at most ``seconds`` (+ ``grace_s`` to finish the codec in hand) and summarise
    what it wrote to ``out`` (a JSON file)."""
    cmd = [sys.executable, "-m", "gcbench.commands.gpu_check.bench_part", "--out", str(out), "--device", device, "--size",
           str(size), "--seconds", str(seconds), "--repeat", str(repeat)]
    for c in codecs or []:
        cmd += ["--codec", c]
    log = out.with_suffix(".log")
    t0 = time.monotonic()
    status, reason = "ok", None
    code = run_boxed(cmd, seconds=seconds + grace_s, log=log)
    if code is None:
        status, reason = "partial", f"stopped after {seconds + grace_s:.0f} s (a codec ran past the budget)"
    elif code != 0:
        status, reason = "failed", f"exit status {code} (see {log.name})"
    doc = json.loads(out.read_text()) if out.is_file() else {"rows": [], "meta": {}}
    summary = summarise(doc)
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    if summary["codecs_skipped"] and status == "ok":
        status, reason = "partial", f"budget: {len(summary['codecs_skipped'])} codec(s) not measured"
    if summary["failed_rows"] and status == "ok":
        status = "failed"
    return {"status": status, "reason": reason, "seconds": round(time.monotonic() - t0, 1), "json": out.name,
            "log": log.name, **summary}


def main(argv: list[str] | None = None) -> int:
    """The child: ``python -m gcbench.commands.gpu_check.bench_part --out F --device D --size N --seconds S``.

    Two passes, so a short budget still gives every codec rows on the device: first every codec in
    eager mode, then codec by codec every mode (compiled kernels compile on their first call; ``auto``
    is what runs by default, so its rows are the ones the targets speak for), each codec's rows
    replacing its eager-only ones. The JSON is rewritten after each codec."""
    from ... import compressors
    from ...bench.harness import MODES, run_bench

    ap = argparse.ArgumentParser(prog="python -m gcbench.commands.gpu_check.bench_part")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", type=int, default=64 * 2**20)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--codec", action="append")
    a = ap.parse_args(argv)
    deadline = time.monotonic() + a.seconds
    names = a.codec or compressors.names()
    out = Path(a.out)
    by_codec: dict[str, list[dict[str, Any]]] = {}
    doc: dict[str, Any] = {"meta": {}, "baselines": [], "modes": {}, "per_codec_s": {}}

    def save() -> None:
        doc["rows"] = doc["baselines"] + [r for n in names if n in by_codec for r in by_codec[n]]
        doc["done"] = [n for n in names if n in by_codec]
        doc["skipped"] = [n for n in names if n not in by_codec]
        doc["compiled_skipped"] = [n for n in doc["done"] if doc["modes"].get(n) == ["eager"]]
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, default=str))
        os.replace(tmp, out)

    for modes in (("eager",), MODES):
        for name in names:
            if time.monotonic() >= deadline:
                break
            t0 = time.monotonic()
            meta, rows = run_bench([name], size=a.size, device=a.device, repeat=a.repeat, warmup=1,
                                   peers=name == "powersgd", stages=True, raw_ef=True, modes=modes)
            doc["meta"] = doc["meta"] or meta
            doc["baselines"] = doc["baselines"] or [r.as_dict() for r in rows if r.kind == "baseline"]
            by_codec[name] = [r.as_dict() for r in rows if r.kind != "baseline"]
            doc["modes"][name] = list(modes)
            doc["per_codec_s"][f"{name} [{'+'.join(modes)}]"] = round(time.monotonic() - t0, 2)
            save()
            print(f"bench {name} {'+'.join(modes)}: {time.monotonic() - t0:.1f} s", flush=True)
    # then, as the budget allows, where one default-mode encode + decode spends its time
    doc["profiles"] = {}
    for name in [n for n in names if n in by_codec]:
        if time.monotonic() >= deadline:
            break
        try:
            doc["profiles"][name] = profile_codec(name, a.size, a.device)
        except Exception as err:  # noqa: BLE001 - a profile is information; its failure is reported, not fatal
            doc["profiles"][name] = {"error": f"{type(err).__name__}: {err}"}
        save()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

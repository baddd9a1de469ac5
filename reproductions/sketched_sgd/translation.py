"""Table 1 analogue: translation with W workers, BLEU on a held-out split.

The paper trains a 90M-parameter transformer and a 70M-parameter LSTM on WMT14 English->German for
60,000 iterations with 4 workers. Here (scale presets in ``spec.toml``): English->German sentence
pairs from Debian's dict-de-en (:func:`gcbench.data.text.load_dictd_pairs`) or WMT14 (the Hugging Face
cache or the user's files: :func:`gcbench.data.text.load_wmt14`), tokenised with ``Dataset.map``
(cached: :func:`gcbench.data.text.tokenized`), a word-level vocabulary built from the training split,
a tiny transformer or LSTM (:mod:`.models`) wrapped in :class:`~.models.FlatParams`, SGD with
momentum, and the methods of :mod:`.methods`. BLEU (:func:`gcbench.data.text.corpus_bleu`) of greedy
translations of the held-out sources.

Worker ``w`` of ``W`` takes, at step ``s``, slice ``w`` of the ``s``-th global batch of an
epoch-wise permutation (:func:`gcbench.workloads.training.batch_indices`), so every method sees the same data.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gcbench.compressors.errors import NonFiniteGradientError
from gcbench.data.errors import DatasetUnavailableError, UnknownDatasetError
from gcbench.data.text import ParallelCorpus, Vocab, corpus_bleu, encode_tokens, load_dictd_pairs, load_wmt14, split_indices, tokenized
from gcbench.workloads.training import batch_indices

from .methods import MethodConfig, MethodRun
from .models import FlatParams, build_translation_model, translation_loss


@dataclass
class TranslationData:
    """Tokenised train and held-out splits (source = English, target = German)."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    train_src: torch.Tensor  # (N, L) int64, 0-padded
    train_tgt: torch.Tensor  # (N, L + 2): BOS y EOS, 0-padded
    test_src: torch.Tensor
    test_tgt: torch.Tensor
    test_sources: list[str]
    test_refs: list[str]
    summary: dict[str, Any]


def check_corpus_name(name: str) -> None:
    """Refuse a translation data set name :func:`load_corpus` does not know, without loading anything.

    Raises:
        DatasetUnavailableError: an unknown name, or a file or folder it names that does not exist.
    """
    if name in ("dict-de-en", "wmt14"):
        return
    if name.startswith(("dictd:", "wmt14:")):
        missing = [f for f in name.partition(":")[2].split(",") if f and not Path(f).expanduser().exists()]
        if missing:
            raise DatasetUnavailableError(f"translation data set {name!r}: {', '.join(missing)} does not exist")
        return
    raise UnknownDatasetError(
        f"unknown translation data set {name!r}: use 'dict-de-en', 'dictd:FOLDER', 'wmt14' or 'wmt14:...'")


def load_corpus(dataset: str | None, preset: Mapping[str, Any]) -> tuple[ParallelCorpus, ParallelCorpus | None]:
    """The corpus named by ``dataset`` (None = the preset's), and a separate test set if it has one.

    ``"dict-de-en"`` / ``"dictd:FOLDER"``: Debian's dictionary (pairs come as (German, English) and
    are turned into (English, German)). ``"wmt14"``: the Hugging Face cache's WMT14 de-en (train,
    newstest2014 as the test set); ``"wmt14:SRC,TGT[,TEST_SRC,TEST_TGT]"``: plain parallel files,
    ``"wmt14:TRAIN.jsonl|parquet[,TEST...]"``: records (:func:`gcbench.data.text.load_wmt14`).
    """
    name = dataset or preset.get("dataset", "dict-de-en")
    check_corpus_name(name)
    max_words = preset.get("max_words")
    if name == "dict-de-en" or name.startswith("dictd:"):
        root = name.partition(":")[2] or None
        c = load_dictd_pairs(root, min_words=int(preset.get("min_words", 5)), max_words=max_words)
        return c.swapped("; English -> German"), None
    held = preset.get("held_out")  # wmt14 or wmt14:...
    return load_wmt14(name.partition(":")[2].split(","), max_pairs=preset.get("max_pairs"), max_words=max_words,
                      held_out=held if isinstance(held, int) else None)


def prepare_data(corpus: ParallelCorpus, test_pairs: ParallelCorpus | list | None, preset: Mapping[str, Any], seed: int) -> TranslationData:
    """Split (when there is no separate test set), build vocabularies from the training split, tokenise.

    Tokens and ids come from ``Dataset.map`` (:func:`gcbench.data.text.tokenized`,
    :func:`gcbench.data.text.encode_tokens`), cached beside a file-backed corpus: a second run reads them.
    """
    held = preset.get("held_out", 500)
    full = tokenized(corpus.as_dataset())
    columns = full.with_format("arrow")
    src_tokens, tgt_tokens = columns["source_tokens"], columns["target_tokens"]
    if test_pairs is None:
        train_idx, test_idx = split_indices(len(corpus.pairs), int(held) if isinstance(held, int) else float(held), seed)
        src_tokens, tgt_tokens = src_tokens.take(train_idx), tgt_tokens.take(train_idx)  # Arrow gathers, no Python rows
        test_corpus, test = None, [corpus.pairs[i] for i in test_idx]
    else:
        test_corpus = test_pairs if isinstance(test_pairs, ParallelCorpus) else ParallelCorpus(list(test_pairs), "test", "test")
        test = list(test_corpus.pairs)
    size, min_count = preset.get("vocab_size"), int(preset.get("min_count", 2))
    src = Vocab.from_tokens(src_tokens, max_size=size, min_count=min_count)
    tgt = Vocab.from_tokens(tgt_tokens, max_size=size, min_count=min_count)
    max_len = int(preset.get("max_len", 16))
    all_s, all_t = encode_tokens(full, src, tgt, max_len)
    if test_corpus is None:
        tr_s, tr_t = all_s[train_idx], all_t[train_idx]
        te_s, te_t = all_s[test_idx], all_t[test_idx]
    else:
        tr_s, tr_t = all_s, all_t
        te_s, te_t = encode_tokens(tokenized(test_corpus.as_dataset()), src, tgt, max_len)
    unk_rate = float((tr_t == tgt.unk).sum()) / max(1, int((tr_t > tgt.eos).sum()))
    summary = {**corpus.summary(), "train_pairs": tr_s.shape[0], "test_pairs": len(test), "src_vocab": len(src),
               "tgt_vocab": len(tgt), "max_len": max_len, "target_unk_rate": unk_rate,
               "split": "separate test files" if test_corpus is not None else f"held out {len(test)} pairs (seeded permutation, seed {seed})"}
    return TranslationData(src, tgt, tr_s, tr_t, te_s, te_t, [a for a, _ in test], [b for _, b in test], summary)


def translate(model: torch.nn.Module, data: TranslationData, n: int | None = None, batch: int = 256) -> list[str]:
    """Greedy translations of the first ``n`` held-out sources (all by default)."""
    inner = model.sync() if isinstance(model, FlatParams) else model
    inner.eval()
    src = data.test_src[:n] if n is not None else data.test_src
    out = []
    for i in range(0, src.shape[0], batch):
        ids = inner.greedy(src[i : i + batch], data.tgt_vocab.bos, data.tgt_vocab.eos, src.shape[1] + 4)
        out += [data.tgt_vocab.decode(r.tolist()) for r in ids]
    inner.train()
    return out


def bleu_interval(hypotheses: list[str], references: list[str], resamples: int, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile bootstrap interval of corpus BLEU: ``resamples`` draws of the pairs with
    replacement (numpy, ``seed``), each scored by sacrebleu (:func:`corpus_bleu`)."""
    if resamples < 1 or not hypotheses:
        raise ValueError(f"need resamples >= 1 and at least one pair, got {resamples} and {len(hypotheses)}")
    rng = np.random.default_rng(seed)
    n = len(hypotheses)
    scores = []
    for _ in range(int(resamples)):
        idx = rng.integers(0, n, n)
        scores.append(corpus_bleu([hypotheses[i] for i in idx], [references[i] for i in idx]))
    lo, hi = np.percentile(scores, [2.5, 97.5])
    return float(lo), float(hi)


def evaluate(model: FlatParams, data: TranslationData, n: int | None = None, bootstrap: int = 0) -> dict[str, Any]:
    """Held-out BLEU (greedy translations of the first ``n`` held-out pairs) and the teacher-forced
    cross entropy per target token on the whole held-out split (OOV target words count as ``<unk>``);
    with ``bootstrap`` > 0 also BLEU's 95% bootstrap interval (:func:`bleu_interval`) as ``bleu_ci``."""
    hyps = translate(model, data, n)
    refs = data.test_refs[: len(hyps)]
    with torch.no_grad():
        loss = float(translation_loss(model, data.test_src, data.test_tgt))
    out: dict[str, Any] = {"bleu": corpus_bleu(hyps, refs), "test_loss": loss}
    if bootstrap > 0:
        out["bleu_ci"] = list(bleu_interval(hyps, refs, bootstrap))
    return out


def on_device(data: TranslationData, device: str) -> TranslationData:
    """``data`` with its tensors on ``device`` (itself on the CPU)."""
    if torch.device(device).type == "cpu":
        return data
    return dataclasses.replace(data, train_src=data.train_src.to(device), train_tgt=data.train_tgt.to(device),
                               test_src=data.test_src.to(device), test_tgt=data.test_tgt.to(device))


def train_translation(
    data: TranslationData,
    *,
    model_kind: str,
    model_params: Mapping[str, Any],
    method: MethodConfig,
    workers: int,
    steps: int,
    batch: int,
    lr: float,
    momentum: float,
    seed: int,
    eval_every: int,
    eval_pairs: int | None,
    threads: int | None = 1,
    on_eval: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    device: str = "cpu",
    bleu_bootstrap: int = 0,
    observe: Callable[[MethodRun], Callable[[int], None]] | None = None,
) -> dict[str, Any]:
    """Train one model with one method; returns curves, final BLEU, bytes and timings: ``train_s``, the
    training steps (gradients, the method's aggregation, the optimizer), and ``measure_s``, the sketch
    measurements a Sketched-SGD run takes beside them (:class:`~.methods.MethodRun`), left out of ``train_s``.

    ``device``: where the model, the batches and the workers' codecs live (``cpu``, ``cuda``,
    ``cuda:N``). ``bleu_bootstrap`` > 0: the final evaluation adds BLEU's 95% bootstrap interval
    (``bleu_ci``) from that many resamples.

    ``accumulator_norms`` holds ``||sum_i v_i|| / W`` after every step for the error-accumulating
    methods (:meth:`~.methods.MethodRun.accumulator_norm`; empty for vanilla); ``on_step(step,
    {"accumulator_norm": ...})`` sees each one (W&B). With ``method.dense_1d`` the 1-D parameters
    travel uncompressed (:class:`~.models.FlatParams`).

    Evaluations (BLEU on ``eval_pairs`` held-out pairs) every ``eval_every`` steps and at the end
    (the final one on the whole held-out split).

    ``observe``: called once with the run's :class:`~.methods.MethodRun` before the first step; the
    function it returns is called with each step's number once the step's gradients are aggregated
    (before the optimizer applies them). It reads the run and changes nothing of it (the selection
    check, :class:`.selectcheck.SelectionRecorder`).

    Divergence is a result, not a crash: when a worker's gradient holds NaN/Inf (the codecs refuse
    it, :class:`NonFiniteGradientError`), training stops before that step's update, the model as it
    stands is evaluated on the whole held-out split, and ``diverged_at`` holds the step (None when
    training finished).
    """
    data = on_device(data, device)
    model = FlatParams(build_translation_model(model_kind, len(data.src_vocab), len(data.tgt_vocab), dict(model_params), seed).to(device),
                       dense_1d=method.dense_1d and method.kind in ("true_topk", "sketched"))
    d = sum(p.numel() for p in model.parameters())
    d_compressed = model.flat.numel()
    run = MethodRun(method, model, workers, threads=threads, momentum=momentum)
    opt = run.optimizer(lr, momentum)
    after_backward = observe(run) if observe is not None else None
    acc_norms: list[float] = []
    n_train = data.train_src.shape[0]
    curve: list[dict[str, Any]] = []
    losses: list[float] = []
    t_train = 0.0
    diverged_at: int | None = None
    for step in range(steps):
        t0, m0 = time.perf_counter(), run.measure_s
        idx = [batch_indices(step, w, workers, batch, seed, n_train) for w in range(workers)]
        opt.zero_grad(set_to_none=True)
        try:
            step_losses = run.backward(lambda w, idx=idx: translation_loss(model, data.train_src[idx[w]], data.train_tgt[idx[w]]))
        except NonFiniteGradientError:
            diverged_at = step
            t_train += time.perf_counter() - t0 - (run.measure_s - m0)
            ev = evaluate(model, data, None, bleu_bootstrap)
            window = losses[-(eval_every or 1):]
            rec = {"step": step, "loss": sum(window) / len(window) if window else math.nan, "bleu": ev["bleu"],
                   "test_loss": ev["test_loss"], "bleu_pairs": len(data.test_refs), "bytes_sent": run.traffic.message_bytes(),
                   "train_s": t_train, "diverged": True, **({"bleu_ci": ev["bleu_ci"]} if "bleu_ci" in ev else {})}
            curve.append(rec)
            if on_eval is not None:
                on_eval(rec)
            break
        if after_backward is not None:
            after_backward(step)
        opt.step()
        t_train += time.perf_counter() - t0 - (run.measure_s - m0)  # the sketch measurements are not training
        losses.append(sum(step_losses) / len(step_losses))
        norm = run.accumulator_norm()
        if norm is not None:
            acc_norms.append(norm)
            if on_step is not None:
                on_step(step + 1, {"accumulator_norm": norm})
        last = step + 1 == steps
        if (eval_every and (step + 1) % eval_every == 0) or last:
            ev = evaluate(model, data, None if last else eval_pairs, bleu_bootstrap if last else 0)
            rec = {"step": step + 1, "loss": sum(losses[-eval_every or 1:]) / len(losses[-eval_every or 1:]),
                   "bleu": ev["bleu"], "test_loss": ev["test_loss"], "bleu_pairs": len(data.test_refs) if last else min(eval_pairs or 10**9, len(data.test_refs)),
                   "bytes_sent": run.traffic.message_bytes(), "train_s": t_train,
                   **({"bleu_ci": ev["bleu_ci"]} if "bleu_ci" in ev else {})}
            curve.append(rec)
            if on_eval is not None:
                on_eval(rec)
    log = run.traffic
    s = log.summary()
    examples = list(zip(data.test_sources[:5], translate(model, data, 5), data.test_refs[:5]))
    return {
        "method": method.as_config(),
        "model": model_kind,
        "parameters": d,
        "compressed_parameters": d_compressed,
        "dense_parameters": d - d_compressed,
        "k": method.k(d_compressed) if method.kind in ("true_topk", "sketched") else None,
        "topk_recovery": run.recovery,
        "topk_recovery_other_hash": run.recovery_other_hash,
        "sketch_error_share": run.error_share_other_hash,
        "sketch_large_errors": run.large_errors_other_hash,
        "sketch_hash_statistics": run.hash_statistics,
        "accumulator_norms": acc_norms,
        "losses": losses,
        "curve": curve,
        "bleu": curve[-1]["bleu"],
        "bleu_ci": curve[-1].get("bleu_ci"),
        "test_loss": curve[-1]["test_loss"],
        "final_loss": sum(losses[-20:]) / len(losses[-20:]) if losses else math.nan,
        "diverged_at": diverged_at,
        "traffic": {"message_bytes": s["message_bytes"], "raw_bytes": s["raw_bytes"], "bytes_by_kind": s["bytes_by_kind"],
                    "compression_ratio": s["compression_ratio"], "steps": s["steps"], "workers": s["workers"],
                    "message_bytes_per_worker_step": s["message_bytes_per_worker_step"],
                    "raw_bytes_per_worker_step": s["raw_bytes_per_worker_step"],
                    # steady state: the last step (step 0 carries one-off checks)
                    "last_step_bytes_per_worker": log.message_bytes(step=len(losses) - 1) / workers if losses else math.nan,
                    "measured_s": s["measured_s"]},
        "train_s": t_train,
        "measure_s": run.measure_s if method.kind == "sketched" else None,  # the other methods take none
        "examples": [{"source": a, "ours": b, "reference": c} for a, b, c in examples],
    }

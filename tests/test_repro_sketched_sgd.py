"""The Sketched-SGD reproduction: spec, text data (dictd, WMT14 files), BLEU, methods, bytes, a micro run."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter

import numpy as np
import pytest
import torch
from gcbench.compressors.methods.sizing import paper_sizing
from gcbench.envs.workers import CodecSpec
from gcbench.reproductions.framework.spec import SOURCE_FIELDS
from gcbench.reproductions.sketched_sgd import load
from gcbench.reproductions.sketched_sgd.methods import (
    MethodConfig,
    MethodRun,
    calibrate_columns,
    k_for,
    measured_step_bytes,
)
from gcbench.reproductions.sketched_sgd.models import FlatParams
from gcbench.reproductions.sketched_sgd.vision import server_pull_bytes
from hypothesis import given
from claim_verdicts import verdicts
from dictd_fixtures import sentence_dict, write_dictd
from hypothesis import strategies as st

from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.text import (
    Vocab,
    corpus_bleu,
    decode_dictd_number,
    encode_dictd_number,
    load_dictd_pairs,
    load_parallel_text,
    parse_dictd_entry,
    split_pairs,
    tokenize,
)

# -- spec ------------------------------------------------------------------------------------------


def test_spec_loads_and_every_paper_value_has_a_source():
    spec = load()
    assert spec.implemented and spec.paper_id == "sketched-sgd"
    assert {"smoke", "full", "micro"} <= set(spec.scales)
    for v in spec.values:
        for f in SOURCE_FIELDS:
            assert getattr(v.source, f).strip(), (v.id, f)
        assert v.table in spec.tables
    # the BLEU table of the authors' slides ("Empirical Results"), as the spec cites it
    bleu = {v.id: v.value for v in spec.values if v.unit == "BLEU"}
    assert bleu == {"t1.transformer.vanilla": 26.29, "t1.transformer.topk": 26.65, "t1.transformer.sketched20": 26.87,
                    "t1.transformer.sketched40": 26.79, "t1.lstm.vanilla": 20.87, "t1.lstm.topk": 22.2, "t1.lstm.sketched40": 20.95}
    assert spec.value("cifar.local_topk.best_compression").value == 2
    # k at the paper's proportion: 100,000 of 90M / 70M parameters
    assert spec.workload["d_per_k"] == {"transformer": 900, "lstm": 700}
    # three gates, guards on the Count Sketch's estimates and on its hashes (bounds from its definition, at any
    # scale) and on Algorithm 2's selection steps: the byte claims hold by construction and every result
    # depends on the training's size
    assert [(c.id, c.kind) for c in spec.claims if c.gate] == [("sketch-estimates-within-bound", "guard"),
                                                                ("sketch-hashes-independent", "guard"),
                                                                ("selection-follows-algorithm-2", "guard")]
    by_id = {c.id: c for c in spec.claims}
    for cid in ("sketch-ratio-20x", "sketch-ratio-40x", "sketched-keeps-ratio", "sketched-beats-local-many-workers",
                "local-topk-2x", "local-topk-falls", "equal-upload"):
        assert by_id[cid].kind == "consistency" and not by_id[cid].gate
    # the whole model's ratio by the paper's count is information (no scale could judge it within 1%)
    assert not any(c.id.startswith("compression-") for c in spec.claims)
    # the headline: held-out loss parity against vanilla and true top-k; BLEU +-5% needs the paper's scale
    assert {c.id for c in spec.claims if c.headline} == {
        "heldout-parity-sketched20", "heldout-parity-sketched40", "heldout-parity-sketched20-vs-topk",
        "heldout-parity-sketched40-vs-topk", "sketched-no-divergence"}
    for c in spec.claims:
        if c.id.startswith("bleu-"):
            assert not c.headline and c.meaningful_at == ("full",) and "noise floor" in c.scale_reason
    assert not any(c.id.startswith("images-") for c in spec.claims)  # dropped, the spec says why


def test_local_topk_ceiling_is_one_sided_and_needs_a_dense_download():
    spec = load()
    claim = next(c for c in spec.claims if c.id == "local-topk-2x")
    assert claim.check == "at_most" and claim.tolerance == 2.0 and claim.testable == "cifar.local_topk.dense_download"
    # above the ceiling with a dense download, the byte accounting is broken; with a sparse one, untestable
    dense = {"cifar.local_topk.compression_wmax": 1.9, "cifar.local_topk.dense_download": 1.0}
    assert verdicts(spec, claim.id, dense, {"cifar.local_topk.compression_wmax": 2.4},
                    {"cifar.local_topk.compression_wmax": 2.39, "cifar.local_topk.dense_download": 0.0}) == [
        "reproduced", "differs", "not at this scale"]


def test_local_topk_runs_at_sketched_sgds_upload():
    # Sketched-SGD 20x at k = 1%: P = 4 and a sketch of 5k floats, so 9% of d up; local top-k's index
    # and value per coordinate give the same upload at 4.5% of d. The claim checks it on the wire: the
    # nominal 20x upload of k = 2.5% (19.85x against 11.16x measured) fails it.
    spec = load()
    images = spec.workload["images"]
    sz = paper_sizing(1_000_000, int(images["sketched_fraction"] * 1_000_000), images["sketched_ratio"], rows=5)
    assert 2 * images["local_topk_fraction"] * 1_000_000 == pytest.approx(sz.sketch_size + sz.P * sz.k, rel=1e-3)
    q = ("cifar.local_topk.upload_compression_wmax", "cifar.sketched.upload_compression_wmax")
    assert verdicts(spec, "equal-upload", dict(zip(q, (11.12, 11.16))), {q[0]: 19.85}, {q[0]: math.nan}) == [
        "reproduced", "differs", "not run"]


# -- dictd -----------------------------------------------------------------------------------------

ENTRIES = [
    # (raw entry text, expected (german, english) or None)
    ("Sein Vorschlag passt mir gar nicht.\n\n   I don't like his suggestion at all.\n",
     ("Sein Vorschlag passt mir gar nicht.", "I don't like his suggestion at all.")),
    ("Aal\n {m} [cook.]\n   eel\n", ("Aal", "eel")),  # parsed, then dropped by the 5-word filter
    ("Seine/ihre Zeit wird\n (noch) kommen.\n   His/her day may come.; His day will come one day too.\n",
     ("Seine/ihre Zeit wird kommen.", "His/her day may come.")),
    ("Er hat bei dem Mord Beihilfe geleistet.\n [jur.]\n   He aided and abetted the\nmurder [coll.] (in court).\n",
     ("Er hat bei dem Mord Beihilfe geleistet.", "He aided and abetted the murder .")),
    ("Sagen Sie ihr durch die Blume, dass …\n\n   Tell her in a roundabout way that …\n",
     ("Sagen Sie ihr durch die Blume, dass", "Tell her in a roundabout way that")),
    ("{adj}\n\n   only notes here\n", None),
]


@given(st.integers(0, 2**62))
def test_dictd_numbers_round_trip(n):
    assert decode_dictd_number(encode_dictd_number(n)) == n


def test_dictd_number_known_values_and_errors():
    assert decode_dictd_number("A") == 0 and decode_dictd_number("/") == 63 and decode_dictd_number("BA") == 64
    assert decode_dictd_number("BOQXT") == ((((1 * 64 + 14) * 64 + 16) * 64 + 23) * 64 + 19)
    with pytest.raises(DataFormatError):
        decode_dictd_number("A-B")


def test_parse_entry_by_hand():
    for text, expected in ENTRIES:
        assert parse_dictd_entry(text) == expected


@pytest.mark.parametrize("gz", [False, True])
def test_dictd_pairs_from_a_generated_dictionary(tmp_path, gz):
    folder = write_dictd(tmp_path / "d", ENTRIES, gz=gz)
    c = load_dictd_pairs(folder)
    expected = [e for _, e in ENTRIES if e is not None and min(len(e[0].split()), len(e[1].split())) >= 5]
    assert c.pairs == expected
    assert c.params["entries"] == len(ENTRIES) + 1
    assert load_dictd_pairs(folder, min_words=1).pairs[1] == ("Aal", "eel")
    assert load_dictd_pairs(folder, max_words=6).pairs == [p for p in expected if max(len(p[0].split()), len(p[1].split())) <= 6]


def test_dictd_errors(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="apt-get install -y dict-de-en"):
        load_dictd_pairs(tmp_path / "nothing")
    folder = write_dictd(tmp_path / "bad", ENTRIES, gz=True, extra_index=["beyond\tBAAAA\tBAAA"])
    with pytest.raises(DataFormatError, match="outside"):
        load_dictd_pairs(folder)
    folder = write_dictd(tmp_path / "bad2", ENTRIES, gz=False, extra_index=["no tabs here"])
    with pytest.raises(DataFormatError, match="expected"):
        load_dictd_pairs(folder)


# -- WMT14-style files, split, vocabulary ---------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_parallel_text_loader(tmp_path, gz):
    en = ["The cat sits on the mat .", "", "A very long sentence with many many words in it", "Hello world"]
    de = ["Die Katze sitzt auf der Matte .", "Leer", "Ein sehr langer Satz mit vielen vielen Wörtern darin", "Hallo Welt"]

    def write(name, lines):
        data = ("\n".join(lines) + "\n").encode()
        p = tmp_path / (name + (".gz" if gz else ""))
        p.write_bytes(gzip.compress(data) if gz else data)
        return p

    s, t = write("train.en", en), write("train.de", de)
    c = load_parallel_text(s, t)
    assert c.pairs == [(en[0], de[0]), (en[2], de[2]), (en[3], de[3])]  # the empty source is skipped
    assert load_parallel_text(s, t, max_words=7).pairs == [(en[0], de[0]), (en[3], de[3])]
    assert load_parallel_text(s, t, max_pairs=1).pairs == [(en[0], de[0])]
    short = write("short.de", de[:2])
    with pytest.raises(DataFormatError, match="line-aligned"):
        load_parallel_text(s, short)
    with pytest.raises(DatasetUnavailableError):
        load_parallel_text(tmp_path / "missing.en", t)


def test_split_is_deterministic_and_disjoint():
    pairs = [(f"s{i}", f"t{i}") for i in range(100)]
    tr, te = split_pairs(pairs, 10, seed=3)
    assert len(te) == 10 and len(tr) == 90 and not set(tr) & set(te) and set(tr) | set(te) == set(pairs)
    assert split_pairs(pairs, 10, seed=3) == (tr, te)
    assert split_pairs(pairs, 10, seed=4)[1] != te
    assert len(split_pairs(pairs, 0.25, seed=0)[1]) == 25
    with pytest.raises(ValueError):
        split_pairs(pairs, 100)


def test_vocab_and_tokens():
    assert tokenize("Don't go, Bob!") == ["don", "'", "t", "go", ",", "bob", "!"]
    v = Vocab(["a b b c", "b c"], max_size=2)
    assert v.itos[4:] == ["b", "c"] and len(v) == 6
    assert v.encode("b c a z") == [4, 5, v.unk, v.unk]
    assert v.decode([v.bos, 4, 5, v.eos, 4]) == "b c"


# -- BLEU -----------------------------------------------------------------------------------------


def _naive_bleu(hyps, refs):
    """Corpus BLEU (Papineni et al. 2002) with sacrebleu's 'exp' smoothing, written from the definition."""
    match, total = [0] * 4, [0] * 4
    hl = rl = 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hl, rl = hl + len(h), rl + len(r)
        for n in range(1, 5):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            match[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            total[n - 1] += max(0, len(h) - n + 1)
    if hl == 0:
        return 0.0
    logs, k = 0.0, 1
    for m, t in zip(match, total):
        if t == 0:
            return 0.0
        if m == 0:
            k *= 2
            logs += math.log(1.0 / (k * t))
        else:
            logs += math.log(m / t)
    bp = 1.0 if hl > rl else math.exp(1 - rl / hl)
    return 100 * bp * math.exp(logs / 4)


def test_bleu_by_hand():
    assert corpus_bleu(["the cat sat on the mat"], ["The cat sat on the mat."][:1]) < 100  # "." is a token
    assert corpus_bleu(["the cat sat on the mat ."], ["The cat sat on the mat."]) == pytest.approx(100)
    # 6 words each: p1 = 5/6, p2 = 3/5, p3 = 2/4 ("the cat sat", "cat sat on"), p4 = 1/3 ("the cat sat on")
    hand = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert corpus_bleu(["the cat sat on a mat"], ["the cat sat on the mat"]) == pytest.approx(hand, rel=1e-9)
    # p1 = 3/6, p2 = 2/5, p3 = 1/4, p4 = 0/3 -> sacrebleu's "exp" smoothing replaces it by 1 / (2 * 3)
    hand = 100 * (3 / 6 * 2 / 5 * 1 / 4 * 1 / 6) ** 0.25
    assert corpus_bleu(["the cat sat down quickly today"], ["the cat sat on the mat"]) == pytest.approx(hand, rel=1e-9)
    # brevity penalty: 3 of 6 words, all n-grams match
    assert corpus_bleu(["the cat sat"], ["the cat sat on the mat"]) == pytest.approx(_naive_bleu(["the cat sat"], ["the cat sat on the mat"]))
    assert corpus_bleu(["x y z w"], ["a b c d"]) == 0.0
    with pytest.raises(ValueError):
        corpus_bleu(["a"], [])


def test_bleu_matches_a_naive_implementation():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(8)]
    for _ in range(20):
        n = int(rng.integers(1, 6))
        refs = [" ".join(rng.choice(words, int(rng.integers(4, 10)))) for _ in range(n)]
        hyps = [" ".join(rng.choice(words, int(rng.integers(3, 11)))) for _ in range(n)]
        assert corpus_bleu(hyps, refs) == pytest.approx(_naive_bleu(hyps, refs), abs=1e-9)


# -- models and methods ---------------------------------------------------------------------------


def _toy(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def test_flat_params_gives_the_unwrapped_gradients():
    net = _toy()
    ref = _toy()
    flat = FlatParams(net)
    x, y = torch.randn(8, 12), torch.randint(0, 4, (8,))
    torch.nn.functional.cross_entropy(flat(x), y).backward()
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    want = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
    assert [n for n, _ in flat.named_parameters()] == ["flat"]
    torch.testing.assert_close(flat.flat.grad, want)
    with torch.no_grad():
        flat.flat.mul_(2)
    inner = flat.sync()
    torch.testing.assert_close(torch.cat([p.reshape(-1) for p in inner.parameters()]), 2 * torch.cat([p.detach().reshape(-1) for p in ref.parameters()]))


def test_true_topk_applies_k_coordinates_and_loses_nothing():
    model = FlatParams(_toy())
    d = model.flat.numel()
    m = MethodConfig("topk", "true_topk", k_fraction=0.05)
    run = MethodRun(m, model, 3)
    x, y = torch.randn(3, 8, 12), torch.randint(0, 4, (3, 8))
    applied = torch.zeros(d)
    computed = torch.zeros(d)
    for _ in range(4):
        grads = []
        for w in range(3):  # the mean gradient, computed independently
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x[w]), y[w]).backward()
            grads.append(model.flat.grad.clone())
        computed += sum(grads) / 3
        model.zero_grad()
        run.backward(lambda w: torch.nn.functional.cross_entropy(model(x[w]), y[w]))
        assert int(torch.count_nonzero(model.flat.grad)) == k_for(d, 0.05)
        applied += model.flat.grad
    residual = run.accumulated_topk.v.reshape(-1)
    torch.testing.assert_close(applied + residual, computed, rtol=1e-5, atol=1e-6)


def test_calibrated_sketch_is_the_largest_within_the_budget():
    d, ratio = 5000, 20.0
    cal = calibrate_columns(d, ratio, k_fraction=0.01, P=2, rows=5)
    assert cal["vanilla_bytes"] == measured_step_bytes(d, CodecSpec(name="identity")) == 4 * d
    params = {"ratio": 0.01, "P": 2, "rows": 5, "seed": 0}
    at = measured_step_bytes(d, CodecSpec(name="sketched-sgd", params={**params, "columns": cal["columns"]}))
    above = measured_step_bytes(d, CodecSpec(name="sketched-sgd", params={**params, "columns": cal["columns"] + 1}))
    assert at == cal["bytes"] <= 4 * d / ratio < above
    assert at == 4 * (5 * cal["columns"] + 2 * math.ceil(0.01 * d))  # table floats + P k values: the wire, checked
    with pytest.raises(ValueError):
        calibrate_columns(d, 1000.0, k_fraction=0.2, P=2, rows=5)


def test_local_topk_union_grows_with_workers_in_real_payload_bytes():
    """The server's reply is the union of the workers' top-k: its exact payload grows with W."""
    d_in, n = 200, 64
    torch.manual_seed(1)
    X, Y = torch.randn(n, d_in), torch.randn(n, 1)
    downs, unions = {}, {}
    for W in (1, 2, 4, 8):
        torch.manual_seed(0)
        model = FlatParams(torch.nn.Linear(d_in, 1, bias=False))
        d = model.flat.numel()
        run = MethodRun(MethodConfig("lt", "local_topk", k_fraction=0.1), model, W)
        k = k_for(d, 0.1)
        rows = torch.arange(n).reshape(8, 8)[:W]  # worker w: its own 8 rows
        # each worker's top-k, computed here independently (first step: no residual yet)
        sets = []
        for w in range(W):
            g = 2 * X[rows[w]].T @ (X[rows[w]] @ model.flat.detach()[:, None] - Y[rows[w]]) / len(rows[w])
            sets.append(set(torch.topk(g.reshape(-1).abs(), k).indices.tolist()))
        run.backward(lambda w, model=model, rows=rows: ((model(X[rows[w]]) - Y[rows[w]]) ** 2).mean())
        down, nnz = server_pull_bytes(model.flat.grad)
        union = set().union(*sets)
        assert nnz == len(union)
        assert set(torch.nonzero(model.flat.grad).reshape(-1).tolist()) == union
        # upload: the worker's top-k payload, k int32 indices + k fp32 values + a header
        up = run.traffic.message_bytes(op="push") / W
        assert 8 * k < up < 8 * k + 256
        # download: the union as indices + values (+ header), or dense fp32 once that is smaller
        dense = 4 * d
        assert (8 * len(union) < down < 8 * len(union) + 256) or (dense < down < dense + 256 and 8 * len(union) > dense)
        downs[W], unions[W] = down, len(union)
    assert unions[1] == k_for(d, 0.1) < unions[2] < unions[4] < unions[8]
    assert downs[1] < downs[2] < downs[4] <= downs[8]


# -- micro end to end -----------------------------------------------------------------------------


def test_micro_reproduction_writes_everything_and_resumes(tmp_path, monkeypatch):
    from gcbench.commands.reproduce import reproduce_main

    monkeypatch.setenv("WANDB_MODE", "offline")
    folder = sentence_dict(tmp_path / "dict")
    out = tmp_path / "results"
    code = reproduce_main("sketched-sgd", scale="micro", out_dir=out, dataset=f"dictd:{folder}", progress=False)
    run = out / "sketched-sgd" / "micro"
    res = json.loads((run / "results.json").read_text())
    assert code == (1 if res["gate_failures"] else 0) and code == 0
    md = (run / "report.md").read_text()
    for claim in res["claims"]:
        assert f"**{claim['id']}**" in md
    status = {c["id"]: c["status"] for c in res["claims"]}
    assert status["sketched-keeps-ratio"] == "reproduced"
    assert status["sketch-estimates-within-bound"] == "reproduced" and not res["gate_failures"]  # the gate judged, green
    assert status["sketch-hashes-independent"] == "reproduced"
    # not at micro: payload headers are more than 1% of the micro models' sketches
    assert status["sketch-ratio-20x"] == status["local-topk-2x"] == status["ddp-bytes-match-simulated"] == "not run"
    assert status["bleu-sketched20-close"] == "not at this scale"
    assert "dict-de-en" in md and "26.29" in md and "digits" in md
    for png in ("table1_bleu_curves.png", "cifar_compression_vs_workers.png", "images_accuracy.png", "accumulator_norm.png",
                "topk_recovery.png"):
        assert (run / "plots" / png).read_bytes()[:4] == b"\x89PNG"
    assert res["cells"]["computed"] == 15  # 7 translation runs, 3 selection checks, the sweep, 4 image runs
    assert len(list((run / "wandb").glob("offline-run-*"))) == 12  # the selection checks log nothing
    assert status["selection-follows-algorithm-2"] == "reproduced"
    assert res["measured"]["t1.selection_violations"] == 0.0
    m = res["measured"]
    assert 20 <= m["t1.transformer.sketched20.compression"] < 21 and 40 <= m["t1.lstm.sketched40.compression"] < 42
    # the consistency checks the spec does not gate: the paper's count and the upload-only figure on the
    # wire are the sizing rule's (P derived from the budget, not a constant)
    for meth in ("sketched20", "sketched40"):
        b = f"t1.transformer.{meth}"
        assert m[f"{b}.compression"] == pytest.approx(m[f"{b}.sizing_paper_compression"], rel=1e-9)
        assert m[f"{b}.upload_compression"] == pytest.approx(m[f"{b}.sizing_upload_compression"], rel=1e-9)
        assert m[f"{b}.overall_compression"] == pytest.approx(m[f"{b}.sizing_overall_compression"], rel=1e-9)
        assert m[f"{b}.overall_compression"] < m[f"{b}.compression"]  # the 1-D parameters travel uncompressed
        assert m[f"{b}.P"] >= 1 and m[f"{b}.sketch_size"] >= m[f"{b}.P"] * m["t1.transformer.k"]
        for q in ("topk_recovery", "topk_recovery_first", "topk_recovery_other_hash"):
            assert 0.0 < m[f"{b}.{q}"] <= 1.0 + 1e-9
        larger = max(m[f"{b}.sketch_error_share"], m[f"{b}.sketch_large_error_share"])
        assert larger == pytest.approx(m[f"{b}.sketch_error_ratio"] * 106 / 1024)  # 5 rows' bound
        first = [json.loads(c.read_text()) for c in (run / "cells").glob(f"t1-transformer-{meth}-*.json")]
        assert m[f"{b}.topk_recovery_first"] == pytest.approx(first[0]["result"]["topk_recovery"][0])
    assert "at the first step, where the accumulation is one step's summed gradient" in md
    assert "A sketch of the same size whose hashes the run does not use" in md
    assert "**The sketch's estimates.**" in md
    assert m["t1.sketch_error_ratio"] == max(m[f"t1.{mo}.{me}.sketch_error_ratio"] for mo, me in
                                             (("transformer", "sketched20"), ("transformer", "sketched40"), ("lstm", "sketched40")))
    cell = json.loads(next((run / "cells").glob("t1-transformer-sketched20-*.json")).read_text())["result"]
    assert set(cell["sketch_hash_statistics"]) == {"run", "measuring"}  # the run's sketch and the measuring one
    for stats in cell["sketch_hash_statistics"].values():
        assert set(stats) == {"sign_balance", "bucket_agreement", "sign_agreement", "largest"}
    assert m["t1.sketch_hash_ratio"] == max(m[f"t1.{mo}.{me}.sketch_hash_deviation"] for mo, me in
                                            (("transformer", "sketched20"), ("transformer", "sketched40"),
                                             ("lstm", "sketched40"))) / 50
    assert "**The sketch's hashes.**" in md
    assert m["t1.transformer.sketched20.P"] > m["t1.transformer.sketched40.P"]
    assert 0 <= m["t1.transformer.vanilla"] <= 100

    lost = next((run / "cells").glob("t1-lstm-topk-*.json"))
    lost.unlink()
    code2 = reproduce_main("sketched-sgd", scale="micro", out_dir=out, dataset=f"dictd:{folder}", progress=False, track=False)
    res2 = json.loads((run / "results.json").read_text())
    assert code2 == 0
    assert res2["cells"]["computed"] == 1 and res2["cells"]["cached"] == 14
    assert res2["measured"]["t1.lstm.topk"] == res["measured"]["t1.lstm.topk"]  # deterministic recomputation


def _wmt14_files(folder, n: int, n_train: int) -> tuple[str, list[str], list[str]]:
    """A tiny WMT14-style corpus (train/test .en/.de files) in ``folder``: its dataset option and sentences."""
    en = [f"the house number {i} is big" for i in range(n)]
    de = [f"das haus nummer {i} ist gross" for i in range(n)]
    paths = []
    for name, lines in (("train.en", en[:n_train]), ("train.de", de[:n_train]), ("test.en", en[n_train:]), ("test.de", de[n_train:])):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(folder / name))
    return "wmt14:" + ",".join(paths), en, de


def test_wmt14_files_feed_the_translation_corpus(tmp_path):
    from gcbench.reproductions.sketched_sgd.translation import load_corpus, prepare_data

    spec, en, de = _wmt14_files(tmp_path, 12, 10)
    corpus, test = load_corpus(spec, {"held_out": 5})
    assert corpus.pairs == list(zip(en[:10], de[:10])) and test.pairs == list(zip(en[10:], de[10:]))
    data = prepare_data(corpus, test, {"max_len": 8, "min_count": 1}, seed=0)
    assert data.summary["train_pairs"] == 10 and data.test_refs == de[10:] and data.summary["split"] == "separate test files"
    assert data.train_tgt[0, 0] == data.tgt_vocab.bos and data.tgt_vocab.decode(data.train_tgt[0, 1:].tolist()) == de[0]
    one = tmp_path / "only-one-file"
    one.write_text("a b\n")
    with pytest.raises(ValueError):  # one plain-text file: a malformed request (DataFormatError)
        load_corpus(f"wmt14:{one}", {})
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_corpus(f"wmt14:{tmp_path / 'absent.en'},{tmp_path / 'absent.de'}", {})


def test_missing_fashion_mnist_falls_back_to_digits_and_says_so(monkeypatch):
    from gcbench.reproductions.sketched_sgd.vision import load_image_data

    from gcbench.data import images

    def missing(root=None):
        raise DatasetUnavailableError("not here")

    monkeypatch.setattr(images, "load_fashion_mnist", missing)
    data = load_image_data(None, {"dataset": "fashion-mnist", "train_images": 50, "test_images": 20})
    assert data.summary["name"] == "digits" and "fashion-mnist" in data.summary["fallback_from"]
    assert data.x_train.shape == (50, 1, 8, 8) and data.x_test.shape[0] == 20
    with pytest.raises(DatasetUnavailableError):  # asked for by name: no silent fallback
        load_image_data("fashion-mnist:/no/such/folder", {})


def test_divergence_is_a_result_not_a_crash(tmp_path):
    """A learning rate that blows the gradients up: the run stops at the step whose gradient is
    NaN/Inf (the codec refuses it), the model as it stands is scored, and the step is recorded."""
    from gcbench.reproductions.sketched_sgd.translation import load_corpus, prepare_data, train_translation

    spec, _, _ = _wmt14_files(tmp_path, 24, 20)
    corpus, test = load_corpus(spec, {"held_out": 4})
    data = prepare_data(corpus, test, {"max_len": 8, "min_count": 1}, seed=0)
    seen = []
    res = train_translation(
        data, model_kind="transformer", model_params={"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_len": 12, "dropout": 0.0},
        method=MethodConfig("sketched", "sketched", k_fraction=0.05, rows=3, columns=64), workers=2, steps=50, batch=4,
        lr=1e12, momentum=0.9, seed=0, eval_every=0, eval_pairs=None, on_eval=seen.append,
    )
    assert res["diverged_at"] is not None and 0 < res["diverged_at"] < 50
    assert len(res["losses"]) == res["diverged_at"] and all(math.isfinite(x) for x in res["losses"])
    assert res["curve"][-1]["diverged"] and res["curve"][-1]["step"] == res["diverged_at"] and seen == res["curve"]
    assert 0.0 <= res["bleu"] <= 100.0


PARITY_FLAGS = {
    "heldout-parity-sketched20": ("t1.transformer.sketched20_vs_vanilla.parity_testable", ("sketched20", "vanilla")),
    "heldout-parity-sketched40": ("t1.transformer.sketched40_vs_vanilla.parity_testable", ("sketched40", "vanilla")),
    "heldout-parity-topk": ("t1.transformer.topk_vs_vanilla.parity_testable", ("topk", "vanilla")),
    "heldout-parity-sketched20-vs-topk": ("t1.transformer.sketched20_vs_topk.parity_testable", ("sketched20", "topk")),
    "heldout-parity-sketched40-vs-topk": ("t1.transformer.sketched40_vs_topk.parity_testable", ("sketched40", "topk")),
}


def _parity_derive(monkeypatch, steps: int, curves: dict[str, list[list[float]]], diverged: tuple[str, ...] = ()):
    """The workload's derived flags for a run of ``steps`` steps (k = 397 of d_c = 357,376, the claims scale's)
    whose methods' training losses per seed are ``curves``, each point held for ``steps / 100`` steps (a
    finished run's record holds one loss per step it trained); the methods in ``diverged`` stopped at a
    non-finite gradient."""
    import importlib
    from types import SimpleNamespace

    from gcbench.reproductions.sketched_sgd.workload import SketchedSGDWorkload

    w = importlib.import_module("gcbench.reproductions.sketched_sgd.workload")
    monkeypatch.setattr(w, "derive_translation", lambda results: {"t1.transformer.k": 397.0,
                                                                  "t1.transformer.compressed_parameters": 357376.0})
    ctx = SimpleNamespace(preset={"translation": {"steps": steps}}, spec=load(), options={})
    kinds = {"vanilla": "vanilla", "topk": "true_topk", "sketched20": "sketched", "sketched40": "sketched"}
    assert steps % 100 == 0
    results = {}
    for meth, seeds in curves.items():
        for i, curve in enumerate(seeds):
            held = [x for x in curve for _ in range(steps // 100)]
            results[f"t1-transformer-{meth}{'-s1' * i}"] = {
                "model": "transformer", "method": {"name": meth, "kind": kinds[meth]}, "losses": held,
                "diverged_at": len(held) if meth in diverged else None}
    return SketchedSGDWorkload.derive(SimpleNamespace(), ctx, results)


FLAT, FALLING = [3.0] * 100, [3.0] * 80 + [3.2] * 10 + [3.0] * 10  # FALLING: the last tenth 6.7% below the one before


def test_parity_is_testable_only_after_enough_sparse_updates_and_where_both_methods_have_settled(monkeypatch):
    """Held-out parity needs each coordinate updated about MIN times by the sparse methods, and each parity
    claim (about both methods' final metric) needs the training cross entropy of both methods it compares
    settled: falling by at most the claims' 3% over the run's last tenth; otherwise "not at this scale"."""
    from gcbench.reproductions.framework.claims import DIFFERS, NOT_AT_SCALE, NOT_RUN, REPRODUCED, evaluate_claim
    from gcbench.reproductions.sketched_sgd.workload import MIN_UPDATES_PER_COORDINATE

    spec = load()
    claims = {c.id: c for c in spec.claims}
    for cid, (flag, methods) in PARITY_FLAGS.items():
        c = claims[cid]
        assert c.testable == flag and c.tolerance == 0.03 and not c.gate
        assert tuple(q.split(".")[2] for q in c.quantities) == methods
        worse = {c.quantities[0]: 2.8, c.quantities[1]: 2.58}  # 8.5% above the reference: outside 3%
        assert evaluate_claim(c, {**worse, flag: 1.0}, spec, "claims").status == DIFFERS
        assert evaluate_claim(c, {**worse, flag: 0.0}, spec, "claims").status == NOT_AT_SCALE
        assert evaluate_claim(c, {**worse, flag: None}, spec, "claims").status == NOT_RUN
        assert evaluate_claim(c, {c.quantities[0]: 2.5, c.quantities[1]: 2.58, flag: 1.0}, spec,
                              "claims").status == REPRODUCED
    assert MIN_UPDATES_PER_COORDINATE == 10.0
    every = ("vanilla", "topk", "sketched20", "sketched40")
    # the claims scale: 300 x 397 / 357,376 = 0.33 updates per coordinate: settled, but not caught up
    out = _parity_derive(monkeypatch, 300, {m: [FLAT, FLAT] for m in every})
    assert out["t1.transformer.updates_per_coordinate"] == pytest.approx(300 * 397 / 357376)
    assert out["t1.transformer.sparse_caught_up"] == 0.0 and out["t1.transformer.vanilla.loss_fall"] == 0.0
    assert all(out[flag] == 0.0 for flag, _ in PARITY_FLAGS.values())
    # 10.1 updates per coordinate, every method settled: every claim testable
    out = _parity_derive(monkeypatch, 9100, {m: [FLAT] for m in every})
    assert out["t1.transformer.sparse_caught_up"] == 1.0
    assert all(out[flag] == 1.0 for flag, _ in PARITY_FLAGS.values())
    # one method still falling (the seed mean of FLAT and FALLING falls 3.3%: more than 3%): exactly the
    # claims that compare it are not testable, whichever side of the comparison it stands on
    for falling in every:
        out = _parity_derive(monkeypatch, 9100, {m: [FLAT, FALLING if m == falling else FLAT] for m in every})
        assert out[f"t1.transformer.{falling}.loss_fall"] == pytest.approx(3.1 / 3.0 - 1)
        for flag, methods in PARITY_FLAGS.values():
            assert out[flag] == (0.0 if falling in methods else 1.0), (falling, flag)
    # a compressed method that diverged has settled: its claims are tested (a divergence is final)
    out = _parity_derive(monkeypatch, 9100, {m: [FLAT if m != "sketched40" else FALLING[:50]] for m in every},
                         diverged=("sketched40",))
    assert out["t1.transformer.sketched40_vs_vanilla.parity_testable"] == 1.0
    # no divergence: a run that has not drained its accumulators cannot show training stays finite (a
    # divergence in it refutes the claim: tests/test_sketched_sgd_claims.py)
    assert out["t1.transformer.divergence_testable"] == out["t1.transformer.sparse_caught_up"]
    nd = claims["sketched-no-divergence"]
    assert nd.testable == "t1.transformer.divergence_testable" and not nd.gate
    q = nd.quantities[0]
    assert evaluate_claim(nd, {q: 0.0, nd.testable: 0.0}, spec, "claims").status == NOT_AT_SCALE
    assert evaluate_claim(nd, {q: 0.0, nd.testable: 1.0}, spec, "claims").status == REPRODUCED
    assert evaluate_claim(nd, {q: 1.0, nd.testable: 1.0}, spec, "claims").status == DIFFERS


def test_a_flag_reading_vanilla_alone_fails_the_parity_test(monkeypatch):
    """Mutation: with the flags reading vanilla's settling alone (the compressed method's fall ignored), a
    still-falling Sketched-SGD would be tested; the derived flag must say it is not."""
    import importlib

    w = importlib.import_module("gcbench.reproductions.sketched_sgd.parity")
    real = w.method_settled

    def vanilla_only(rs, fall, bound):
        return real(rs, fall, bound) if rs and rs[0]["method"]["name"] == "vanilla" else 1.0

    curves = {"vanilla": [FLAT], "topk": [FLAT], "sketched20": [FALLING], "sketched40": [FLAT]}
    assert _parity_derive(monkeypatch, 9100, curves)["t1.transformer.sketched20_vs_vanilla.parity_testable"] == 0.0
    monkeypatch.setattr(w, "method_settled", vanilla_only)
    assert _parity_derive(monkeypatch, 9100, curves)["t1.transformer.sketched20_vs_vanilla.parity_testable"] == 1.0


def test_compressed_parameters_come_from_the_sparse_methods_whatever_the_order():
    """Updates per coordinate are steps x k / d_c: d_c leaves out the 1-D parameters the sparse methods send
    uncompressed. Vanilla's flat tensor holds every parameter, so its record must not set d_c, even when it
    is read after the sparse ones (cells are read in name order: ``...-topk`` before ``...-vanilla``)."""
    from gcbench.reproductions.sketched_sgd.workload import derive_translation

    def record(cell):
        """A cell named ``...-vanilla`` (every parameter in its flat tensor, no k) or ``...-topk`` (d_c = 990, k = 1)."""
        sparse = not cell.endswith("-vanilla")
        compressed = 990 if sparse else 1000
        return {"model": "transformer", "method": {"name": cell.rsplit("-", 1)[1], "kind": "true_topk" if sparse else "vanilla"},
                "bleu": 1.0, "test_loss": 2.0, "parameters": 1000, "compressed_parameters": compressed,
                "dense_parameters": 1000 - compressed, "k": 1 if sparse else None,
                "traffic": {"last_step_bytes_per_worker": 4000.0}}

    for cells in (("t1-transformer-topk", "t1-transformer-vanilla"), ("t1-a-vanilla", "t1-b-topk")):
        out = derive_translation({cell: record(cell) for cell in cells})
        assert out["t1.transformer.compressed_parameters"] == 990.0 and out["t1.transformer.k"] == 1.0
        assert out["t1.transformer.parameters"] == 1000.0
    # vanilla alone: no sparse run, so neither k nor d_c (the flags stay unset, not computed from d)
    only = derive_translation({"t1-transformer-vanilla": record("t1-transformer-vanilla")})
    assert "t1.transformer.compressed_parameters" not in only and "t1.transformer.k" not in only


def test_heldout_paths_give_each_parity_pairs_gap_halfway_and_at_the_end():
    """Information beside the parity claims: the compared method's held-out loss over its reference's (seed
    means) at the first evaluation at or past half the run and at the last one, for every pair a parity flag
    compares; none for a pair whose runs do not share their evaluations (a diverged run) or hold a
    non-finite loss. The report states them in order."""
    from gcbench.reproductions.sketched_sgd.report import heldout_gaps
    from gcbench.reproductions.sketched_sgd.parity import heldout_paths

    def run(losses):
        return {"curve": [{"step": 100 * (i + 1), "test_loss": x} for i, x in enumerate(losses)]}

    runs = {"vanilla": [run([4.0, 3.0, 2.0, 2.0, 2.0]), run([4.0, 3.0, 2.0, 2.0, 2.0])],
            "topk": [run([4.0, 3.2, 2.4, 2.2, 2.1])],
            "sketched20": [run([5.0, 4.0, 3.0, 2.4, 2.2]), run([5.0, 4.0, 2.8, 2.4, 2.0])],
            "sketched40": [run([5.0, 4.0, 3.0])]}  # stopped early: no shared evaluations
    out = heldout_paths(load(), "transformer", runs)
    p = "t1.transformer.sketched20_vs_vanilla"
    assert out[f"{p}.heldout_half_step"] == 300.0  # 2 x 300 >= 500, 2 x 200 < 500
    assert out[f"{p}.heldout_rel_half"] == pytest.approx(2.9 / 2.0) and out[f"{p}.heldout_rel_end"] == pytest.approx(2.1 / 2.0)
    q = "t1.transformer.sketched20_vs_topk"
    assert out[f"{q}.heldout_rel_half"] == pytest.approx(2.9 / 2.4) and out[f"{q}.heldout_rel_end"] == pytest.approx(2.1 / 2.1)
    assert out["t1.transformer.topk_vs_vanilla.heldout_rel_end"] == pytest.approx(2.1 / 2.0)
    assert not any(k.startswith("t1.transformer.sketched40_vs_") for k in out)
    runs["topk"] = [run([4.0, 3.2, float("nan"), 2.2, 2.1])]
    out = heldout_paths(load(), "transformer", runs)
    assert "t1.transformer.topk_vs_vanilla.heldout_rel_half" not in out and f"{q}.heldout_rel_half" not in out
    assert heldout_gaps(out, "transformer") == ["Sketched 20x / Vanilla 1.45 at step 300 → 1.05 at the end"]

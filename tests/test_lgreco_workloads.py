"""The L-GreCo reproduction's workloads beyond the digits MLP: the ResNet-18 model, its image data
(Fashion-MNIST IDX files generated here, read by torchvision; the digits fallback), the WikiText-103 loader of the LM
(tiny generated files, tokenised and raw variants, broken ones), the data-set option's routing,
and a micro ResNet-18 run through real gloo ranks (report, JSON, sim == real)."""

from __future__ import annotations

import gzip
import json
import struct
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gcbench.reproductions.lgreco import load
from gcbench.reproductions.lgreco.lm import (
    CONTEXT,
    build_lm,
    is_text_dataset,
    lm_loss,
    load_text,
    load_wikitext,
    read_wikitext_tokens,
)
from gcbench.reproductions.lgreco.resnet import build_resnet18, cifar_resnet18
from torchvision.models import ResNet
from gcbench.reproductions.lgreco.ranks import build_policy
from gcbench.reproductions.lgreco.vision import build_image_model, evaluate_images, load_image_data
from gcbench.reproductions.lgreco.workload import LGreCoWorkload

from gcbench.data import images
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.wikitext import EOS
from gcbench.commands.reproduce import EXIT_OK, reproduce_main

# -- ResNet-18 ------------------------------------------------------------------------------------


def test_resnet18_is_torchvisions_resnet18_with_the_cifar_stem():
    with torch.device("meta"):  # shapes only: no 11M-parameter initialisation
        m = cifar_resnet18(64, 3, 10)
    assert isinstance(m, ResNet) and isinstance(m.maxpool, torch.nn.Identity) and m.conv1.kernel_size == (3, 3)
    import torchvision

    with torch.device("meta"):
        tv = torchvision.models.resnet18(num_classes=10)
    # every parameter but the stem's is torchvision's own ResNet-18's, name and shape
    ours = {k: tuple(p.shape) for k, p in m.named_parameters() if k != "conv1.weight"}
    assert ours == {k: tuple(p.shape) for k, p in tv.named_parameters() if k != "conv1.weight"}
    # the CIFAR ResNet-18 (3x3 stem, [2, 2, 2, 2] basic blocks, 1x1 projection shortcuts): 11,173,962 parameters
    assert sum(p.numel() for p in m.parameters()) == 11_173_962
    convs = [mod for mod in m.modules() if isinstance(mod, torch.nn.Conv2d)]
    assert sum(c.kernel_size == (3, 3) for c in convs) == 17 and sum(c.kernel_size == (1, 1) for c in convs) == 3  # 17 conv + fc = 18 layers
    assert [c.out_channels for c in convs if c.kernel_size == (1, 1)] == [128, 256, 512]
    small = build_resnet18(4, 1, 7, seed=3)
    assert sum(p.numel() for p in small.parameters()) < 50_000
    for side in (8, 14, 28):
        assert small(torch.randn(2, 1, side, side)).shape == (2, 7)
    again = build_resnet18(4, 1, 7, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(small.parameters(), again.parameters()))
    with pytest.raises(ValueError):
        cifar_resnet18(0)


def test_resnet_block_shortcut_matches_a_hand_computation():
    m = build_resnet18(2, 1, 3, seed=0).eval()
    blk = m.layer2[0]  # stride 2, 2 -> 4 channels: projection shortcut
    x = torch.randn(1, 2, 6, 6)
    with torch.no_grad():
        out = blk(x)
        main = blk.bn2(blk.conv2(torch.relu(blk.bn1(blk.conv1(x)))))
        sc = blk.downsample[1](F.conv2d(x, blk.downsample[0].weight, stride=2))
    assert out.shape == (1, 4, 3, 3)
    torch.testing.assert_close(out, torch.relu(main + sc))
    assert m.layer1[1].downsample is None


# -- image data of the ResNet cells ------------------------------------------------------------------


def idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 8, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape) + arr.astype(">u1").tobytes()


@pytest.fixture
def fashion(tmp_path, monkeypatch):
    """A tiny Fashion-MNIST: 64 train + 32 test 28x28 images whose class sets the mean brightness."""
    rng = np.random.default_rng(0)
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "cache"))  # torchvision's layout is prepared here
    d = tmp_path / "fm"
    d.mkdir()
    for stem, n in (("train", 64), ("t10k", 32)):
        y = (np.arange(n) % 10).astype(np.uint8)
        x = np.clip(rng.normal(20 + 22 * y[:, None, None], 10, (n, 28, 28)), 0, 255).astype(np.uint8)
        (d / f"{stem}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(x)))
        (d / f"{stem}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx(y)))
    return d


def test_resnet_image_data_pools_normalises_and_caps(fashion):
    cfg = {"model": "resnet18", "dataset": f"fashion-mnist:{fashion}", "image_size": 14, "train_samples": 40,
           "eval_samples": 20, "width": 2, "seed": 0}
    data = load_image_data(cfg)
    assert data.x_train.shape == (40, 1, 14, 14) and data.x_test.shape == (20, 1, 14, 14) and data.classes == 10
    assert data.summary["name"] == "fashion-mnist" and data.summary["resized"] == "28x28 -> 14x14 (average pooling)"
    assert abs(float(data.x_train.mean())) < 1e-5 and abs(float(data.x_train.std()) - 1) < 1e-3  # training statistics
    raw = images.load_fashion_mnist(fashion)
    ref = raw.x_train[:40].double().div(255).reshape(40, 1, 14, 2, 14, 2).mean(dim=(3, 5))  # 2x2 average pooling by hand
    ref = (ref - ref.mean()) / ref.std()
    torch.testing.assert_close(data.x_train.double(), ref, atol=1e-4, rtol=1e-4)
    model = build_image_model(cfg, data)
    assert isinstance(model, ResNet) and model.conv1.in_channels == 1
    ev = evaluate_images(model, data)
    assert 0 <= ev["test_accuracy"] <= 1 and ev["train_loss"] > 0 and model.training
    digits = load_image_data({"model": "mlp", "seed": 0})
    assert digits.x_train.shape == (1500, 64) and digits.x_test.shape == (297, 64)


def _ctx(scale: str, **options):
    spec = load()
    return SimpleNamespace(spec=spec, scale=scale, preset=spec.scales[scale], options=options)


def test_dataset_option_routes_images_and_text(fashion, tmp_path, monkeypatch):
    wl = LGreCoWorkload(load())
    assert wl.dataset_choice(_ctx("smoke")) == ("digits", None)
    with pytest.raises(DatasetUnavailableError, match="ResNet-18 scale"):
        wl.dataset_choice(_ctx("smoke", dataset="cifar100:/x"))
    assert wl.dataset_choice(_ctx("resnet", dataset=f"cifar100:{tmp_path}")) == (f"cifar100:{tmp_path}", None)
    monkeypatch.delenv(images.FASHION_ENV, raising=False)
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(images, "DEBIAN_FASHION_DIR", tmp_path / "nowhere")
    used, note = wl.dataset_choice(_ctx("full"))
    assert used == "digits" and "Fashion-MNIST was not found" in note and "apt-get install" in note
    monkeypatch.setenv(images.FASHION_ENV, str(fashion))
    assert wl.dataset_choice(_ctx("full")) == ("fashion-mnist", None)
    # a text data set goes to the LM cells, the image cells keep theirs
    ctx = _ctx("smoke", dataset="wikitext103:/data/wt103")
    cfg = wl.run_config(ctx)
    assert cfg["model"] == "mlp" and "dataset" not in cfg
    assert wl.lm_config(ctx, cfg)["dataset"] == "wikitext103:/data/wt103"
    assert wl.lm_config(_ctx("smoke"), cfg)["dataset"] == "pydoc"
    full = wl.run_config(_ctx("full", epochs=7, lr=0.01))
    assert full["model"] == "resnet18" and full["width"] == 64 and full["steps"] == 7 and full["lr"] == 0.01
    assert is_text_dataset("WikiText103:x") and is_text_dataset("pydoc") and not is_text_dataset("cifar100:x")


@pytest.mark.parametrize("codec,params,ef,method", [("qsgd", {"levels": 7}, False, "lgreco"), ("topk", {"ratio": 0.01}, True, "cgx"),
                                                     ("topk", {"ratio": 0.01}, True, "lgreco")])
def test_adaptive_methods_on_a_small_resnet_in_the_simulator(codec, params, ef, method):
    """QSGD and TopK ladders over ResNet-18's 4-D convolution, batch-norm and linear layers: decisions
    are made, every choice is on the ladder, and L-GreCo stays within the uniform budget."""
    from gcbench.envs.simulated import SimulatedCluster
    from gcbench.envs.workers import CodecSpec

    torch.manual_seed(0)
    model = build_resnet18(2, 1, 10, seed=0)
    layers = [n for n, _ in model.named_parameters()]
    spec = CodecSpec(name=codec, params=params, error_feedback=ef)
    policy = build_policy(method, spec, every=2, warmup=1, layers=layers)
    policy._rank = 0
    sim = SimulatedCluster(model, 2, spec, bucket_cap_mb=0.01, policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(2, 4, 1, 8, 8), torch.randint(0, 10, (2, 4))
    for _ in range(4):
        opt.zero_grad()
        sim.backward(lambda w: F.cross_entropy(model(x[w]), y[w]))
        opt.step()
    assert [d["step"] for d in sim.decisions] == [3]
    chosen = sim.decisions[0]["layer_params"]
    assert set(chosen) == set(layers)
    axis = {"qsgd": "levels", "topk": "ratio"}[codec]
    ladder_values = {policy.ladder.params(j)[axis] for j in range(len(policy.ladder))}
    assert {v[axis] for v in chosen.values()} <= ladder_values
    if method == "lgreco":
        d = policy.decisions[-1]
        assert d["error"] <= d["budget"] * (1 + 1e-9) and d["bytes"] <= d["reference_bytes"]
    assert all(torch.isfinite(p).all() for p in model.parameters())


# -- WikiText-103 ----------------------------------------------------------------------------------------

TRAIN = """
 = Valkyria Chronicles III =

 Senjō no Valkyria 3 : <unk> Chronicles is a tactical role @-@ playing video game .
 The game began development in 2010 , carrying over a large portion of the work .
 The game 's battle system , the <unk> system , was carried over directly .
"""


def wikitext(folder, variant="tokens", train=TRAIN * 3, valid=TRAIN, test=TRAIN * 2):
    folder.mkdir(parents=True, exist_ok=True)
    for split, text in (("train", train), ("valid", valid), ("test", test)):
        (folder / f"wiki.{split}.{variant}").write_text(text, encoding="utf-8")
    return folder


def test_wikitext_tokens_eos_and_vocabulary(tmp_path):
    d = wikitext(tmp_path / "wikitext-103")
    toks = read_wikitext_tokens(d / "wiki.test.tokens")
    lines = [ln.split() for ln in (TRAIN * 2).splitlines() if ln.split()]
    assert toks == [t for ln in lines for t in ln + [EOS]]  # whitespace tokens, <eos> after each non-empty line
    data = load_wikitext(tmp_path, vocab=6)  # found in the wikitext-103/ sub-folder
    train = [t for ln in (TRAIN * 3).splitlines() if ln.split() for t in ln.split() + [EOS]]
    from collections import Counter

    counts = Counter(t for t in train if t != "<unk>")
    top = [w for w, _ in counts.most_common(5)]
    expect = torch.tensor([top.index(t) + 1 if t in top else 0 for t in train])
    assert torch.equal(data.train, expect) and data.vocab == 6 and data.name == "wikitext103"
    assert data.valid is not None and data.valid.numel() == len(train) // 3 and data.test.numel() == 2 * len(train) // 3
    assert "tokenised" in data.description and "wiki.test" in data.description
    assert torch.equal(load_text(f"wikitext103:{d}", vocab=6).train, data.train)
    capped = load_wikitext(d, vocab=6, max_tokens=40)  # each split cut at 40 tokens (the vocabulary from those)
    assert capped.train.numel() == capped.test.numel() == 40 and "at most 40 tokens" in capped.description
    model = build_lm(0, vocab=6)
    x = data.train[: 2 * CONTEXT].reshape(2, CONTEXT)
    assert torch.isfinite(lm_loss(model, x, x))  # the LM takes the ids
    from gcbench.reproductions.lgreco.lm import lm_perplexity

    assert (data.test.numel() - 1) // CONTEXT >= 3
    assert lm_perplexity(model, data, chunk=1) == pytest.approx(lm_perplexity(model, data), rel=1e-5)  # chunked = one pass


def test_wikitext_raw_variant(tmp_path):
    raw = " = Title =\n\n It's 2010 ; the game, \"Valkyria\" sold 1.5m copies.\n" * 20
    d = wikitext(tmp_path / "raw", "raw", train=raw, valid=raw, test=raw)
    toks = read_wikitext_tokens(d / "wiki.train.raw", "raw", max_tokens=25)
    assert toks[:5] == ["=", "Title", "=", EOS, "It's"]
    assert toks[5:22] == ["2010", ";", "the", "game", ",", '"', "Valkyria", '"', "sold", "1", ".", "5", "m", "copies", ".", EOS, "="]
    assert len(toks) == 25
    assert "raw" in load_wikitext(d).description


def test_wikitext_missing_and_broken_files(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="no such folder"):
        load_wikitext(tmp_path / "absent")
    with pytest.raises(DatasetUnavailableError, match="no wiki.train.tokens"):
        load_wikitext(tmp_path)
    d = wikitext(tmp_path / "w")
    (d / "wiki.valid.tokens").unlink()
    with pytest.raises(DatasetUnavailableError, match="missing: wiki.valid.tokens"):
        load_wikitext(d)
    d = wikitext(tmp_path / "nul")
    (d / "wiki.train.tokens").write_bytes(b" = A =\n the \x00\x01 binary\n")
    with pytest.raises(DataFormatError, match=r"wiki.train.tokens:2: NUL byte"):
        load_wikitext(d)
    d = wikitext(tmp_path / "latin1")
    (d / "wiki.test.tokens").write_bytes(TRAIN.encode() + b" caf\xe9 au lait\n")
    with pytest.raises(DataFormatError, match=r"wiki.test.tokens:7: not UTF-8"):
        load_wikitext(d)
    d = wikitext(tmp_path / "empty", test="\n \n")
    with pytest.raises(DataFormatError, match="wiki.test.tokens: no tokens"):
        load_wikitext(d)
    d = wikitext(tmp_path / "short", test=" a b c .\n")
    with pytest.raises(DataFormatError, match="fewer than one 33-token window"):
        load_wikitext(d)
    with pytest.raises(DatasetUnavailableError, match="wikitext103:FOLDER"):
        load_text("wikitext103")
    with pytest.raises(DatasetUnavailableError, match="unknown text data set"):
        load_text("penn:x")
    assert load_text(None).name == "pydoc"


# -- the ResNet-18 code path end to end ----------------------------------------------------------


def test_lm_text_choice_finds_wikitext_or_falls_back(tmp_path, monkeypatch):
    wl = LGreCoWorkload(load())
    monkeypatch.delenv("GCBENCH_WIKITEXT103", raising=False)
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "cache"))
    used, note = wl.text_choice(_ctx("full"))
    assert used == "pydoc" and "WikiText-103 was not found" in note and "GCBENCH_WIKITEXT103" in note
    assert wl.text_choice(_ctx("smoke")) == ("pydoc", None)
    d = wikitext(tmp_path / "wt")
    monkeypatch.setenv("GCBENCH_WIKITEXT103", str(d))
    assert wl.text_choice(_ctx("full")) == (f"wikitext103:{d}", None)  # resolved here, so every rank reads the same folder
    assert wl.lm_config(_ctx("full"), wl.run_config(_ctx("smoke")))["dataset"] == f"wikitext103:{d}"
    assert load_text("wikitext103").train.numel() > 0
    with pytest.raises(DatasetUnavailableError, match="wikitext103"):  # an explicit text option has no fallback
        monkeypatch.delenv("GCBENCH_WIKITEXT103")
        load_text("wikitext103")


@pytest.mark.slow
def test_micro_resnet_run_writes_report_and_sim_equals_real(fashion, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    rng = np.random.default_rng(0)
    words = np.array(["the", "game", "of", "a", "war", ",", ".", "<unk>", "in", "2010", "and", "was"])
    lines = [" " + " ".join(rng.choice(words, 40)) + " \n" for _ in range(60)]
    monkeypatch.setenv("GCBENCH_WIKITEXT103", str(wikitext(tmp_path / "wt103", train="".join(lines), valid="".join(lines[:5]),
                                                            test="".join(lines[:10]))))
    code = reproduce_main("lgreco", scale="micro-resnet", out_dir=tmp_path, resume=False, progress=False, track=False,
                          dataset=f"fashion-mnist:{fashion}")
    out = tmp_path / "lgreco" / "micro-resnet"
    report = (out / "report.md").read_text()
    assert code == EXIT_OK, report
    results = json.loads((out / "results.json").read_text())
    m = results["measured"]
    assert m["t4.uniform.ratio"] > 1 and m["t4.lgreco.ratio"] > 1 and m["dp.max_error_over_budget"] <= 1.0
    assert m["sim.equals_real"] == 1.0  # BN ResNet: simulated W=2 == real gloo W=2, bit for bit
    lg = results["cells"]["results"]["train-powersgd"]["lgreco"]
    assert lg["replicas_identical"] and lg["choices_identical"] and [d["step"] for d in lg["applied"]] == [6]
    assert lg["model_params"] == sum(p.numel() for p in build_resnet18(4, 1, 10).parameters())
    assert lg["data"]["name"] == "fashion-mnist" and lg["data"]["used_train"] == 64
    assert "ResNet-18 (width 4)" in report and "fashion-mnist" in report and "Table 4 analogue" in report
    # the LM cells read the generated WikiText-103 (found through $GCBENCH_WIKITEXT103)
    lm = results["cells"]["results"]["lm-powersgd"]
    assert lm["lgreco"]["data"]["name"] == "wikitext103" and [d["step"] for d in lm["lgreco"]["applied"]] == [4]
    assert lm["lgreco"]["replicas_identical"] and np.isfinite(m["lm.lgreco.perplexity"]) and m["lm.uniform.ratio"] > 1
    assert "WikiText-103 (tokenised files in" in report
    # the LM cell's L-GreCo plan re-measured apart from the DP's tables (lgreco-within-budget-lm)
    assert m["budget.lm.tables_exact"] == 1.0 and -1.0 < m["budget.lm.excess"] <= 1e-4
    assert next(c for c in results["claims"] if c["id"] == "lgreco-within-budget-lm")["status"] == "reproduced"


def test_bad_data_stops_the_run_before_any_rank_starts(tmp_path, monkeypatch, capsys):
    from gcbench.commands.reproduce import EXIT_USAGE

    monkeypatch.setenv("WANDB_MODE", "disabled")
    kw = {"out_dir": tmp_path, "resume": False, "progress": False, "track": False}
    assert reproduce_main("lgreco", scale="micro-resnet", dataset=f"cifar100:{tmp_path / 'absent'}", **kw) == EXIT_USAGE
    assert f"{tmp_path / 'absent'} does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()  # a folder that is there but does not hold the data set: the loader says so
    assert reproduce_main("lgreco", scale="micro-resnet", dataset=f"cifar100:{tmp_path / 'empty'}", **kw) == EXIT_USAGE
    assert "empty: no cifar-100-python/ here" in capsys.readouterr().err
    assert reproduce_main("lgreco", scale="smoke", dataset="imagefolder:/x", **kw) == EXIT_USAGE
    assert "takes the sklearn digits only" in capsys.readouterr().err
    assert reproduce_main("lgreco", scale="smoke", dataset=f"digits:{tmp_path}", **kw) == EXIT_USAGE  # before any rank
    assert "digits takes no path" in capsys.readouterr().err
    bad = wikitext(tmp_path / "wt", test=" caf\xe9\n")
    (bad / "wiki.test.tokens").write_bytes(b" caf\xe9 au lait\n")
    assert reproduce_main("lgreco", scale="smoke", dataset=f"wikitext103:{bad}", **kw) == EXIT_USAGE
    assert "wiki.test.tokens:1: not UTF-8" in capsys.readouterr().err

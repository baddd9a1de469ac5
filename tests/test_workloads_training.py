"""The shared mini-batch order, the replicas' digest and the digits split, and who may import them."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from gcbench.data.digits import N_TRAIN, load_digits_tensors
from gcbench.data.images import load_digits_images
from gcbench.workloads.models import build_model
from gcbench.workloads.training import batch_indices, params_digest

ROOT = Path(__file__).resolve().parents[1]


def test_batch_order_is_pinned():
    # committed reproductions were run with this order: a change to it changes every training result
    assert batch_indices(0, 0, 2, 4, 0).tolist() == [44, 371, 23, 483]
    assert batch_indices(400, 1, 3, 16, 7).tolist() == [514, 273, 465, 1041, 1447, 576, 374, 295,
                                                        338, 1165, 244, 546, 996, 794, 1305, 146]


def test_batch_indices_cover_the_training_split_once_per_epoch():
    per_epoch = N_TRAIN // (10 * 3)
    epoch = torch.cat([batch_indices(s, w, 3, 10, seed=2) for s in range(per_epoch) for w in range(3)])
    assert epoch.numel() == per_epoch * 30 == len(set(epoch.tolist())) and int(epoch.max()) < N_TRAIN
    assert not torch.equal(batch_indices(per_epoch, 0, 3, 10, seed=2), batch_indices(0, 0, 3, 10, seed=2))


def test_params_digest_tells_replicas_apart():
    a, b = build_model("mlp", seed=1), build_model("mlp", seed=1)
    assert params_digest(a) == params_digest(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-7
    assert params_digest(a) != params_digest(b)


def test_digits_images_split_where_training_does():
    d, imgs = load_digits_tensors(), load_digits_images()
    assert imgs.x_train.shape[0] == N_TRAIN and imgs.x_test.shape[0] == d.x.shape[0] - N_TRAIN == 297
    assert torch.equal(imgs.y_train, d.y[:N_TRAIN]) and torch.equal(imgs.y_test, d.y[N_TRAIN:])


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_reproductions_do_not_import_cli_commands():
    # the reproductions build on gcbench's library packages, never on a command-line command's module
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "reproductions").rglob("*.py"))
                 if any(m == "gcbench.commands" or m.startswith("gcbench.commands.") for m in _imports(p))]
    assert not offenders, offenders

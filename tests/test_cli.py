"""The ``gcbench`` command line (typer's CliRunner, in process) and the timing helper."""

from __future__ import annotations

import json
import math
import re
import time

import pytest
import torch
from typer.testing import CliRunner

from gcbench import __version__, compressors
from gcbench.cli import app
from gcbench.compressors import registry
from gcbench.compressors.codecs.identity import Cast
from gcbench.workloads.gradients import digits_gradients, digits_sparse_gradient
from gcbench.measure.timing import measure

runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture
def ghost_entry(monkeypatch):
    """Add a registry entry whose module does not exist (as while a codec is being written)."""
    e = registry.Entry("ghost-codec", "no_such_module_yet:Ghost", "a codec nobody has written yet")
    monkeypatch.setattr(registry, "ENTRIES", [*registry.ENTRIES, e])
    return e


# --- help, version, codecs -------------------------------------------------------------------------


def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("codecs", "compare", "train", "reproduce", "data", "bench"):
        assert command in result.output
    assert "--version" in result.output


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_every_help_shows_every_option_and_summary_whole_at_any_width(columns, monkeypatch, capsys):
    """The console script's help, narrow (click's plain help, which wraps) or wide (rich's panels): no
    option name, word or command summary cut short ("..." / an ellipsis), every option listed."""
    import click
    import typer

    from gcbench import cli

    monkeypatch.setattr(cli.app, "rich_markup_mode", cli.app.rich_markup_mode)  # run() sets it; restored after
    monkeypatch.setenv("COLUMNS", str(columns))
    group = typer.main.get_command(cli.app)
    commands = {name: group.get_command(click.Context(group), name) for name in group.list_commands(click.Context(group))}

    def show(*args: str) -> str:
        monkeypatch.setattr("sys.argv", ["gcbench", *args, "--help"])
        with pytest.raises(SystemExit) as stop:
            cli.run()
        assert stop.value.code in (0, None)
        return capsys.readouterr().out

    top = show()
    assert "\u2026" not in top and "..." not in top.replace("[ARGS]...", "") and ("\u256d" in top) == (columns >= cli.RICH_HELP_MIN_COLUMNS)
    for name, cmd in commands.items():
        assert " ".join(cmd.help.split("\n\n")[0].split()) in " ".join(top.replace("\u2502", " ").split()), name
        text = show(name)
        assert "\u2026" not in text, (name, columns)
        for param in [p for p in cmd.params if not getattr(p, "hidden", False)]:
            for opt in [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]:
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), (name, opt, columns)


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert f"gcbench {__version__}" in result.output
    assert torch.__version__ in result.output


@pytest.mark.parametrize("columns", [80, 200])
def test_codecs_lists_every_registry_name_and_declarations(columns):
    """A table on a wide console, one block per codec on a narrow one: nothing cut short either way."""
    result = runner.invoke(app, ["codecs"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0 and "\u2026" not in result.stdout
    for name in compressors.names():
        assert re.search(rf"\b{re.escape(name)}\b", result.stdout), name
    # identity is importable and declares itself linear and lossless
    line = next(l for l in result.stdout.splitlines() if re.search(r"\bidentity\b", l))
    assert ("linear" in line and "lossless" in line) if columns >= 120 else "declares: linear, lossless" in result.stdout
    # fp16's entry default reaches the parameter column, whole; every reference whole
    assert "to='float16'" in result.stdout
    text = " ".join(result.stdout.replace("\u2502", " ").split())
    if columns < 120:
        from gcbench.commands.codecs import codec_info

        for name in compressors.names():
            assert " ".join(codec_info(name).reference.split()) in text, name


def test_codecs_skips_a_missing_module_with_a_note(ghost_entry):
    result = invoke("codecs")
    assert result.exit_code == 0
    assert "ghost-codec" in result.stdout
    assert "does not exist" in result.stdout
    assert re.search(r"not importable.*ghost-codec", result.stdout.replace("\n", " "))


# --- compare ---------------------------------------------------------------------------------------


def _rows(doc: dict) -> dict[str, dict]:
    return {r["codec"]: r for r in doc["results"]}


def test_compare_identity_and_fp16_json(tmp_path):
    out = tmp_path / "out.json"
    md = tmp_path / "out.md"
    result = invoke("compare", "--codec", "identity", "--codec", "fp16", "--repeat", "2", "--json", str(out),
                    "--markdown", str(md))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    rows = _rows(doc)
    assert list(rows) == ["identity", "fp16"]
    grads = digits_gradients(seed=0, steps=10)
    numel = sum(g.numel() for g in grads.values())
    assert doc["gradient"]["numel"] == numel

    ident = rows["identity"]
    assert ident["status"] == "ok"
    assert ident["ratio"] == 1.0
    assert ident["rel_l2_error"] == 0.0
    # real bytes: raw fp32 plus one header + CRC per tensor
    assert 4 * numel < ident["nbytes"] < 4 * numel + 200 * len(grads)

    fp16 = rows["fp16"]
    assert fp16["status"] == "ok"
    # independently: the serialized fp16 payloads of the same gradient, and the cast error
    codec = compressors.get("fp16")
    expected_bytes = sum(len(codec.encode(g).to_bytes()) for g in grads.values())
    assert fp16["nbytes"] == expected_bytes
    assert fp16["bits_per_element"] == pytest.approx(8 * expected_bytes / numel)
    assert 16.0 < fp16["bits_per_element"] < 16.5
    assert fp16["ratio"] == pytest.approx(ident["nbytes"] / fp16["nbytes"])
    err = math.sqrt(sum(float((g.half().float() - g).double().pow(2).sum()) for g in grads.values()))
    ref = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))
    assert fp16["rel_l2_error"] == pytest.approx(err / ref, rel=1e-6)
    assert 0 < fp16["rel_l2_error"] < 1e-3
    for r in (ident, fp16):
        assert r["encode_ms"] > 0 and r["decode_ms"] > 0
        assert r["encode_timing"]["kind"] == "measured" and r["encode_timing"]["repeat"] == 2
        assert [t["name"] for t in r["tensors"]] == list(grads)

    text = md.read_text()
    assert "| identity | 32." in text and "| fp16 | 16." in text
    assert "bits/" in result.stdout and "element" in result.stdout and "measured" in result.stdout  # header on two lines


def test_compare_sparse_gradient(tmp_path):
    out = tmp_path / "sparse.json"
    result = invoke("compare", "--sparse", "--codec", "identity", "--repeat", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    g = digits_sparse_gradient(seed=0, steps=10)["logreg.weight"]
    assert doc["gradient"]["sparse"] is True
    assert doc["gradient"]["numel"] == g.shape[0]
    assert doc["gradient"]["nnz"] == g._nnz()
    assert "logistic regression" in doc["gradient"]["source"]
    row = _rows(doc)["identity"]
    assert row["rel_l2_error"] == 0.0
    assert row["bits_per_nonzero"] == pytest.approx(8 * row["nbytes"] / g._nnz())
    assert "bits/" in result.stdout and "non-zero" in result.stdout


def test_compare_reports_a_missing_module_as_skipped(ghost_entry, tmp_path):
    out = tmp_path / "ghost.json"
    result = invoke("compare", "--codec", "ghost-codec", "--codec", "identity", "--repeat", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    rows = _rows(json.loads(out.read_text()))
    assert rows["ghost-codec"]["status"] == "skipped"
    assert "does not exist" in rows["ghost-codec"]["error"]
    assert rows["identity"]["status"] == "ok"
    assert "1 ok, 0 failed, 1 skipped" in result.stdout
    strict = invoke("compare", "--codec", "ghost-codec", "--repeat", "1", "--strict")
    assert strict.exit_code == 1


def test_compare_reports_a_codec_that_raises_as_failed(monkeypatch, tmp_path):
    original = Cast.encode

    def flaky(self, x, *args, key=None, **kwargs):
        if key == "out.bias":
            raise RuntimeError("boom")
        return original(self, x, *args, key=key, **kwargs)

    monkeypatch.setattr(Cast, "encode", flaky)
    out = tmp_path / "fail.json"
    result = invoke("compare", "--codec", "fp16", "--codec", "identity", "--repeat", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    rows = _rows(json.loads(out.read_text()))
    assert rows["fp16"]["status"] == "failed"
    assert rows["fp16"]["error"].startswith("RuntimeError on tensor 'out.bias'")
    assert rows["fp16"]["bits_per_element"] is None
    assert rows["identity"]["status"] == "ok"
    assert "failed: RuntimeError" in result.stdout


def test_compare_rejects_unknown_names_and_devices():
    assert invoke("compare", "--codec", "no-such-codec").exit_code == 2
    assert invoke("compare", "--codec", "identity", "--device", "not-a-device").exit_code == 2


# --- timing ----------------------------------------------------------------------------------------


def test_measure_counts_calls_and_times_them():
    calls = []

    def work():
        calls.append(1)
        time.sleep(0.002)

    t = measure(work, repeat=3, warmup=2)
    assert len(calls) == 5
    assert len(t.samples) == 3 and t.kind == "measured"
    assert 0.002 <= t.min_s <= t.median_s <= t.max_s < 1.0
    with pytest.raises(ValueError):
        measure(work, repeat=0)


def test_parse_params_types_values():
    from gcbench.cli import parse_params

    assert parse_params(["ratio=0.01", "k=5", "method=exact", "rescale=true"]) == {
        "ratio": 0.01, "k": 5, "method": "exact", "rescale": True,
    }
    import typer

    for bad in ("no-equals-sign", "=0.01"):  # no separator; no key
        with pytest.raises(typer.BadParameter, match=re.escape(f"expected KEY=VALUE, got {bad!r}")) as err:
            parse_params(["k=5", bad])
        assert err.value.param_hint == "--param"


def test_train_simulated_reports_real_bytes(tmp_path):
    out = tmp_path / "train.json"
    res = runner.invoke(
        app, ["train", "--codec", "fp16", "--simulate", "--nproc", "2", "--steps", "2", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    text = json.dumps(doc)
    assert "modelled" in text and "measured" in text
    # fp16 halves the payload data; headers make it a little more than half of fp32
    ratio = re.search(r'"compression_ratio": ([0-9.]+)', text)
    assert ratio and 1.8 < float(ratio.group(1)) <= 2.0, text[:2000]


def test_train_writes_the_report_as_markdown_with_its_labels(tmp_path):
    out, md_path = tmp_path / "train.json", tmp_path / "train.md"
    res = runner.invoke(app, ["train", "--codec", "qsgd", "--simulate", "--nproc", "2", "--steps", "2",
                              "--json", str(out), "--markdown", str(md_path)])
    assert res.exit_code == 0, res.output
    doc, md = json.loads(out.read_text()), md_path.read_text()
    b = doc["bytes"]
    assert "## Bytes per worker per step\n\nCounted" in md and "*measured*" in md and "*modelled*" in md
    assert f"| sent | {b['message_bytes_per_worker_step']:.1f} |" in md
    assert f"{b['compression_ratio']:.4f}x" in md
    assert f"{doc['modelled']['comm']['mean_step_s']:.6f}" in md and doc["modelled"]["profile"]["name"] in md


def test_train_rejects_unknown_codec():
    res = runner.invoke(app, ["train", "--codec", "nope", "--simulate", "--steps", "1"])
    assert res.exit_code != 0


def test_bench_command_writes_json_with_clone_ratios(tmp_path):
    out = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", "-c", "fp16", "-c", "signsgd", "--size", "20000", "-r", "2", "--warmup", "0",
                              "--no-peers", "--no-stages", "--json", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    for name in ("clone", "copy", "fp16", "signsgd"):
        assert f'"{name}"' in text
    assert "encode_x_clone" in text


def test_bench_command_usage_errors_exit_2():
    assert runner.invoke(app, ["bench", "-c", "no-such-codec", "--size", "1000"]).exit_code == 2
    assert runner.invoke(app, ["bench", "-c", "fp16", "--size", "lots"]).exit_code == 2


def test_train_adaptive_lgreco_makes_decisions(tmp_path):
    out = tmp_path / "train.json"
    res = runner.invoke(app, ["train", "--codec", "topk", "--simulate", "--nproc", "2", "--steps", "4",
                              "--adaptive", "lgreco", "--adaptive-every", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["adaptive"]["policy"] == "lgreco" and doc["adaptive"]["decisions"], doc.get("adaptive")


def test_train_adaptive_rejects_unknown_policy():
    res = runner.invoke(app, ["train", "--codec", "topk", "--simulate", "--steps", "2", "--adaptive", "nonsense"])
    assert res.exit_code == 2, res.output


def test_train_adaptive_time_objective_in_real_ranks(tmp_path):
    out = tmp_path / "train.json"
    res = runner.invoke(app, ["train", "--codec", "topk", "--nproc", "2", "--steps", "6", "--adaptive", "lgreco",
                              "--adaptive-every", "4", "--adaptive-objective", "time", "--profile", "none",
                              "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["adaptive"]["objective"] == "time" and len(doc["adaptive"]["decisions"]) == 1
    # the simulated cluster has no measured sync time: a usage error, not a silent size objective
    res = runner.invoke(app, ["train", "--codec", "topk", "--simulate", "--steps", "2", "--adaptive", "lgreco",
                              "--adaptive-objective", "time"])
    assert res.exit_code == 2


def test_reproduce_help_lists_every_scale_preset_with_its_description():
    import re

    from gcbench.reproductions import scale_catalogue

    result = CliRunner().invoke(app, ["reproduce", "--help"], env={"COLUMNS": "4000", "TERM": "dumb"})
    assert result.exit_code == 0
    text = re.sub(r"\s+", " ", result.output)
    catalogue = scale_catalogue()
    assert {paper for paper, _, _ in catalogue} == {"sketchml", "sketched-sgd", "3lc", "lgreco"}
    for paper, scale, description in catalogue:
        assert description.strip(), f"{paper} scale {scale} has no description in its spec"
        assert f"{paper} {scale}: {description[:40]}" in text, (paper, scale)

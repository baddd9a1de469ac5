"""What the SketchML report says of the run it renders: the message-level experiment's size and executor
count read from the run's own parameters (not KDD12's where the run used another size), the note on the
driver's unmerged buffers, a condition stated only where it holds, the grid's epochs as planned, and the
learning rate's source."""

from __future__ import annotations

from types import SimpleNamespace

from gcbench.reproductions.sketchml.critical_path import SERIAL, DriverModel
from gcbench.reproductions.sketchml.paperscale import METHODS, PaperScaleParams
from gcbench.reproductions.sketchml.report import discussion, grid_sentence, lr_source, quantity_labels
from gcbench.reproductions.sketchml.report_msg import paper_messages_section, paper_messages_title, paper_words
from gcbench.reproductions.sketchml.settings import GRID_EPOCHS, grid_epochs
from gcbench.reproductions.sketchml.workload import workload

PROFILES = {"c1": "sketchml-cluster1", "c2": "sketchml-cluster2-10"}
DRIVERS = {"c1": DriverModel(4, 1), "c2": DriverModel(24, 1)}
PAPER = paper_words(workload().spec)


def _message_result(params: dict) -> dict:
    """A message-level result written by hand for ``params`` (one entry per executor)."""
    n = int(params["workers"])

    def method(nbytes: int) -> dict:
        return {"encode_s": [0.01] * n, "decode_s": [0.02] * n, "push_bytes": [nbytes] * n, "key_bytes": [1] * n,
                "keys": [10] * n, "agg_keys": 15, "agg_encode_s": 0.01, "agg_decode_s": 0.01, "update_s": 0.125,
                "down_bytes": 2 * nbytes}

    methods = {m: method(1_000_000 if m == "sketchml" else 8_000_000) for m in METHODS}
    workers = [{"compute_s": 1.0, "keys": 10, "nnz": 12}] * n
    return {"params": params, "workers": workers, "methods": methods, "generate_s": 0.1}


def _smoke_params() -> dict:
    return {**PaperScaleParams().as_dict(), **workload().spec.scale("smoke")["paper_messages"]}


def test_the_message_section_names_the_runs_own_size_and_executors():
    prm = _smoke_params()
    assert (prm["features"], prm["workers"]) == (100_000, 4)  # the smoke preset's message-level size
    text = paper_messages_section(_message_result(prm), {"msg.density": 0.1, "msg.agg_density": 0.15}, PROFILES, DRIVERS, PAPER)
    assert "100,000 features, 4 executors x 2,100 rows" in text
    assert "batch of KDD12's train split" not in text and "KDD12's is 54,000,000 features" in text
    assert "the 4 decodes" in text and "the 4 messages share the driver's link" in text
    assert "ten" not in text.split()
    assert "Epoch = 10 iterations (batch ratio 10%)" in text
    assert paper_messages_title(prm).endswith("run here at a reduced size: 100k features, 4 executors")

    kdd = PaperScaleParams().as_dict()
    text = paper_messages_section(_message_result(kdd), {"msg.density": 0.1, "msg.agg_density": 0.15}, PROFILES, DRIVERS, PAPER)
    assert "54,000,000 features, 10 executors x 1,117,000 rows (one executor's share of a 10% batch of KDD12's train split)" in text
    assert "the 10 decodes" in text
    assert paper_messages_title(kdd) == "Measured: one iteration at the paper's message size (Table 4, Fig. 9(a), Fig. 8(c))"


def test_the_message_section_says_the_driver_time_leaves_out_the_buffers_merge():
    """Over several driver cores the merge of their buffers is not in the driver's time; the serial model has none."""
    prm = _smoke_params()
    measured = {"msg.density": 0.1, "msg.agg_density": 0.15}
    text = paper_messages_section(_message_result(prm), measured, PROFILES, DRIVERS, PAPER)
    assert "leaves out the merge of its cores' buffers" in text and "understated" in text
    serial = paper_messages_section(_message_result(prm), measured, PROFILES, {"c1": SERIAL, "c2": SERIAL}, PAPER)
    assert "merge" not in serial


def test_the_labels_name_the_runs_message_size():
    labels = quantity_labels(_smoke_params())
    assert labels["msg.compression_rate"] == "rate (100k features)"
    assert labels["msg.c2.sketchml.epoch_s"].endswith("; 100k features, 4 executors)")
    assert "100k features" in labels["cal.c2.sketchml.epoch_s"]
    kdd = quantity_labels(PaperScaleParams().as_dict())
    assert kdd["msg.compression_rate"] == "rate (54M features)"
    assert "features" not in kdd["msg.c2.sketchml.epoch_s"]
    assert "54M" not in quantity_labels()["msg.compression_rate"]


def _summary(measured: float, comm: float) -> dict:
    return {"summary": {"mean_measured_s": measured, "mean_modelled_comm_s": comm, "mean_epoch_time_s": measured + comm,
                        "mean_message_bytes": 1000.0, "bytes_up_per_epoch": 1e6, "bytes_down_per_epoch": 1e6}}


def _ctx() -> SimpleNamespace:
    spec = workload().spec
    return SimpleNamespace(spec=spec, scale="smoke", tables=["2"], options={}, preset=spec.scale("smoke"))


def _why(results: dict) -> str:
    text = discussion(_ctx(), results, {}, {})
    return next(p for p in text.split("\n\n") if p.startswith("**Why end-to-end times differ"))


def test_the_discussion_names_the_message_level_size_it_ran_at():
    base = {"train-lr-sketchml": _summary(2.0, 0.1), "train-lr-adam-double": _summary(1.0, 0.1)}
    para = _why({**base, "paper-messages": _message_result(_smoke_params())})
    assert "measures the same balance at a reduced message size (100k features, 4 executors" in para
    assert "at KDD12's message size" not in para
    para = _why({**base, "paper-messages": _message_result(PaperScaleParams().as_dict())})
    assert "measures the same balance at KDD12's message size (54M features, 10 executors)" in para
    assert "sketchml-cluster2-10, nominal" in para  # the modelled communication names its profile


def test_as_here_is_said_only_where_sketchmls_extra_coding_exceeds_the_transfer_it_saves():
    costs_more = _why({"train-lr-sketchml": _summary(2.0, 0.1), "train-lr-adam-double": _summary(1.0, 0.1)})
    assert "transfer it saves, as here," in costs_more
    pays_off = _why({"train-lr-sketchml": _summary(1.05, 0.1), "train-lr-adam-double": _summary(1.0, 0.5)})
    assert "as here" not in pays_off and "(not so here)" in pays_off


def test_the_grid_sentence_gives_the_epochs_the_grid_cells_run():
    preset = {"lr_grid": [0.003, 0.01], "epochs": 60}  # no grid_epochs: planning runs GRID_EPOCHS a point
    assert grid_epochs(preset) == GRID_EPOCHS
    assert grid_sentence(preset, {"lr": 0.003}).startswith(f"grid [0.003, 0.01] with Adam-double, {GRID_EPOCHS} epochs a point")
    assert grid_epochs({**preset, "grid_epochs": 5}) == 5


def test_the_grid_cells_run_grid_epochs():
    wl = workload()
    preset = {k: v for k, v in wl.spec.scale("full").items() if k != "grid_epochs"}
    ctx = SimpleNamespace(options={}, preset=preset, tables=["2"], scale="full")
    grid = [c for c in wl.plan(ctx, {}) if c.name.startswith("grid-")]
    assert grid and all(c.config["epochs"] == GRID_EPOCHS for c in grid)


def test_the_rate_option_is_named_as_the_rates_source():
    preset = {"lr_grid": [0.003, 0.01], "grid_epochs": 5, "epochs": 25}
    assert lr_source({"lr": 0.01}, preset, {"lr": 0.01}) == "option --lr"
    assert lr_source({}, preset, {"lr": 0.01}).startswith("grid [0.003, 0.01]")
    assert lr_source({}, {"lr": 0.003, "epochs": 20}, {"lr": 0.003}) == "preset"


def test_the_header_names_the_rate_option_as_the_rates_source(tmp_path):
    """With ``--lr`` the run trains at that rate (settings.lr_for), so the header names the option, not the grid."""
    from gcbench.reproductions.sketchml.report import build_report

    wl = workload()
    ctx = SimpleNamespace(spec=wl.spec, options={"lr": 0.05}, preset=wl.spec.scale("full"), tables=["2"], scale="full",
                          cache={}, out_dir=tmp_path)
    header = next(x for x in build_report(wl, ctx, {}, {}).header_lines if x.startswith("Workload"))
    assert "lr 0.05, svm 0.05, linear 0.05 (option --lr)" in header and "grid [" not in header


def test_the_prose_quotes_the_papers_numbers_from_the_spec_as_the_paper_prints_or_implies_them():
    """Table 4's epochs, Table 2's LR times and Fig. 8(b)'s message, and what they imply: 10.4x (1041 / 100 s),
    2.84x and 1.36x (23 and 11 h over 8.1 h), about 292, 80 and 142 epochs (8.1 h / 100 s, 23 h / 1041 s,
    11 h / 278 s) and 3.67x."""
    assert {k: PAPER[k] for k in ("t4_speedup", "t2_adam", "t2_zipml", "epochs.sketchml", "epochs.adam", "epochs.zipml",
                                  "epochs_ratio", "message_mb", "t4.adam-double")} == {
        "t4_speedup": "10.4", "t2_adam": "2.84", "t2_zipml": "1.36", "epochs.sketchml": "292", "epochs.adam": "80",
        "epochs.zipml": "142", "epochs_ratio": "3.67", "message_mb": "35.58", "t4.adam-double": "1041"}

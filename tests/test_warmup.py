"""Compile ahead of time (compressors/kernels/warmup.py) and the DDP hook's use of it: in compiled or
auto mode the codec's kernels run (and compile) before training, on fresh codecs whose state is not
the live one's; in eager mode nothing runs."""

from __future__ import annotations

from torch import nn

from gcbench.compressors import get
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels.warmup import MAX_SIZES, sizes_to_warm, warm_up
from gcbench.envs.ddp_hook import GCBenchHookState

#: A size above the kernels' degenerate-call rule (so that it runs compiled) and small to compile for.
N = 1 << 15


def test_sizes_to_warm_follow_the_mode():
    big = fused.AUTO_MIN_NUMEL
    assert sizes_to_warm([big, 10, big, 5], "eager") == []
    assert sizes_to_warm([big, 10, 2 * big], "auto") == [2 * big, big]
    assert sizes_to_warm([10, 0, 3], "compiled") == [10, 3]
    assert len(sizes_to_warm(range(1, 100), "compiled")) == MAX_SIZES


def test_warm_up_runs_the_compiled_kernels_on_fresh_codecs():
    built: list = []

    def fresh(n):
        built.append(get("ef-signsgd"))
        return built[-1]

    live = get("ef-signsgd")
    with fused.forced("compiled"):
        calls = fused.compiled_call_count()
        report = warm_up(fresh, [N])
        assert report.sizes == [N] and report.mode == "compiled"
        assert fused.compiled_call_count() > calls
    assert len(built) == 1 and not live.state_dict()  # the live codec's residual was never made
    with fused.forced("eager"):
        calls = fused.call_count()
        assert warm_up(fresh, [N]).sizes == []
        assert fused.call_count() == calls and len(built) == 1


def test_hook_compiles_ahead_for_the_models_sizes_without_touching_its_state():
    model = nn.Sequential(nn.Linear(256, 128), nn.Linear(128, 10))  # weights of 32768 and 1280 values
    with fused.forced("compiled"):
        calls = fused.compiled_call_count()
        state = GCBenchHookState("signsgd", model=model, error_feedback=True)
        assert [r.sizes for r in state.warmed] == [[32768, 1280, 128, 10]]
        assert fused.compiled_call_count() > calls
        assert state._codecs is None  # noqa: SLF001 - no live codec (nor residual) built yet
        off = GCBenchHookState("signsgd", model=model, compile_ahead=False)
        assert off.warmed == []
    with fused.forced("eager"):
        assert GCBenchHookState("signsgd", model=model).warmed == []

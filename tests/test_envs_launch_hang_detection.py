"""The launcher tells a rank's own error from a collective timeout by the exception's type and
message only: words in the traceback's source lines or paths do not make an error a hang."""

from __future__ import annotations

import pytest
from gcbench.envs.errors import WorkerFailedError
from gcbench.envs.launch import launch

pytestmark = pytest.mark.distributed


def _raises_on_a_line_that_mentions_the_timeout(ctx):
    raise ValueError("bad learning rate") if ctx.timeout_s else None


def _raises_with_timeout_in_its_message(ctx):
    raise ValueError(f"bad option timeout_s={ctx.timeout_s}")


def _times_out(ctx):
    raise TimeoutError("timed out waiting for a peer")


def _failure(fn) -> WorkerFailedError:
    with pytest.raises(WorkerFailedError) as info:
        launch(fn, 1, timeout_s=5, start_method="fork")
    return info.value


def test_a_plain_exception_raised_on_a_line_that_mentions_timeout_is_raised_with_its_traceback():
    err = _failure(_raises_on_a_line_that_mentions_the_timeout)
    assert err.reason == "raised" and err.ranks == (0,), str(err)
    assert "rank 0 raised ValueError: bad learning rate" in str(err)
    assert "Traceback (most recent call last)" in str(err) and "_raises_on_a_line_that_mentions_the_timeout" in str(err)


def test_a_value_error_whose_message_says_timeout_is_no_hang():
    err = _failure(_raises_with_timeout_in_its_message)
    assert err.reason == "raised" and "Traceback (most recent call last)" in str(err), str(err)


def test_a_timeout_error_is_the_consequence_of_a_hang():
    err = _failure(_times_out)
    assert err.reason == "hung" and err.ranks == (0,), str(err)

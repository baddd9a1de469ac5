"""Shared pytest configuration: deterministic torch, few threads, hypothesis profiles."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

#: The cores this process may run on.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
#: Test processes sharing the machine: pytest-xdist's workers (``-n``) each get their share of the cores.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
torch.set_num_threads(max(1, min(2, CORES // WORKERS)))
#: The most workers ``-n auto`` starts (each imports torch; the longest module, about four minutes on
#: one core, bounds the run's time long before more workers would shorten it).
MAX_AUTO_WORKERS = 8
# Eager kernels by default: compiling (compressors/kernels/core.py) costs seconds to minutes per kernel on a
# loaded machine; tests/test_fused.py forces compiled mode and checks it against eager byte for byte.
os.environ.setdefault("GCBENCH_COMPILE", "0")

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core this process may run on, at most :data:`MAX_AUTO_WORKERS`."""
    return max(1, min(MAX_AUTO_WORKERS, CORES))


def pytest_collection_modifyitems(config, items):
    """Files with more ``slow`` tests first (each file's tests keep their order), so that under
    ``-n ... --dist loadfile`` the long files start early and the workers end together; CUDA-marked
    tests skipped without a device."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.path] = slow.get(item.path, 0) + ("slow" in item.keywords)
    items.sort(key=lambda item: -slow[item.path])  # stable: files and tests otherwise in collection order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def devices():
    """Devices to parametrize over: cpu always, cuda when present (marked so it skips elsewhere)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


#: Environment variable naming a folder of the papers' texts (``*.txt``, any names). The tests that
#: compare a spec's numbers with the text it cites use it when it is set.
PAPER_TEXTS_ENV = "GCBENCH_PAPER_TEXTS"


@pytest.fixture
def paper_text():
    """``paper_text(marker)``: the text in ``$GCBENCH_PAPER_TEXTS`` that mentions ``marker`` most
    (e.g. ``"SketchML"``), or None when the variable is unset or no text mentions it."""

    def find(marker: str) -> str | None:
        folder = os.environ.get(PAPER_TEXTS_ENV)
        if not folder or not os.path.isdir(folder):
            return None
        best, best_count = None, 0
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".txt"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            if text.count(marker) > best_count:
                best, best_count = text, text.count(marker)
        return best

    return find


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread (as the 3LC workload trains); tiny tensors on 2 threads only wait."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def _isolated_text_caches(tmp_path_factory, monkeypatch):
    """Hugging Face datasets' cache and gcbench's Arrow text cache in the test run's temporary folder,
    not the user's (``HF_HOME`` is read at call time by :mod:`gcbench.data.hf`)."""
    from gcbench.data import text

    base = tmp_path_factory.getbasetemp() / "text-caches"
    monkeypatch.setenv("HF_HOME", str(base / "huggingface"))
    monkeypatch.setattr(text, "text_cache_dir", lambda root=None: (base if root is None else type(base)(root)) / "text")


@pytest.fixture(autouse=True)
def _isolated_compile_choices(tmp_path_factory, monkeypatch):
    """``auto`` mode's measured choices (compressors/kernels/choice.py) in the test run's temporary
    folder, not the user's cache: a probe timed under the suite's load, or with a test's small
    ``PROBE_NUMEL``, would decide which mode the user's later runs get. A test that sets
    ``GCBENCH_CACHE_DIR`` keeps its own folder."""
    from gcbench.compressors.kernels import choice

    real, private = choice.cache_path, tmp_path_factory.getbasetemp() / "compile-choice" / choice.CACHE_FILE
    monkeypatch.setattr(choice, "cache_path", lambda: real() if os.environ.get(choice.CACHE_ENV) else private)


#: Address space a decode may add in the hostile-payload tests: a 2**20-element decode needs a few
#: tens of MB; a multi-GB allocation from a small payload fails with an untyped error and so fails
#: the check.
MEMORY_BOUND = 1 << 30


@pytest.fixture(scope="module")
def bounded_memory():
    """Cap the address space a test module's decodes may add at MEMORY_BOUND, restored after."""
    import resource

    from gcbench.commands.fuzz import limit_address_space

    old = limit_address_space(MEMORY_BOUND)
    yield
    resource.setrlimit(resource.RLIMIT_AS, old)


@pytest.fixture(scope="module")
def tiny_data():
    """96 seeded noise images (1x8x8, 10 classes) for the 3LC trainer's tests; the last 32 double as test set."""
    from gcbench.reproductions.threelc.train import PreparedData

    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (96,), generator=g)
    return PreparedData(x, y, x[:32], y[:32], {"name": "noise"})


# --- gate mutation tests must show their gate red and green (tests/gate_evidence.py) ----------------

_CLAIM_LOG = None
_GATED_BY_TEST: dict[str, str] | None = None


def pytest_configure(config):
    """Log every claim evaluation of the test run, for the gate mutation tests' evidence."""
    global _CLAIM_LOG
    from gate_evidence import ClaimLog

    _CLAIM_LOG = ClaimLog()
    _CLAIM_LOG.install()


def pytest_unconfigure(config):
    if _CLAIM_LOG is not None:
        _CLAIM_LOG.uninstall()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A ``test_gate_mutation_*`` test fails unless its call evaluated its gated claim as *differs* and
    the test run has evaluated it green (:func:`gate_evidence.missing_evidence`)."""
    global _GATED_BY_TEST
    name = getattr(item, "originalname", item.name)
    from gate_evidence import PREFIX, gated_claim_by_test_name, load_specs, missing_evidence

    if not name.startswith(PREFIX) or _CLAIM_LOG is None:
        return (yield)
    start = len(_CLAIM_LOG.events)
    result = yield
    if _GATED_BY_TEST is None:
        _GATED_BY_TEST = gated_claim_by_test_name(load_specs())
    lack = missing_evidence(name, _GATED_BY_TEST.get(name), _CLAIM_LOG.events[start:], _CLAIM_LOG.events)
    if lack:
        pytest.fail(lack, pytrace=False)
    return result

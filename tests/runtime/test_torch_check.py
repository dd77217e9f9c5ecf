"""Cross-check against PyTorch's distributed engine: gloo all-reduce equals parplan's data plane on
every registry algorithm, and DDP training equals parplan's data-parallel training.

The torch tests are marked ``torch`` and skipped, with the reason, where torch is not installed;
the missing-torch message is tested everywhere. One 4-process gloo group serves the whole module
(p = 2 and 3 run on its prefix subgroups), because spawning processes that import torch is slow.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from parplan.collectives.dataplane import run_schedule
from parplan.collectives.registry import ALGORITHMS, build_schedule
from parplan.errors import RuntimeCheckError
from parplan.runtime.torch_check import GlooGroup, run_gloo_allreduce, train_ddp_regression
from parplan.runtime.training import (
    Kind,
    make_regression,
    schedule_reducer,
    train_data_parallel,
    train_full_batch,
    train_threaded,
)

HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH,
    reason="torch is not installed, so there is no gloo engine to cross-check against "
    "(pip install 'parplan[torch]')",
)
RANKS = (2, 3, 4)
SPECS = {"hierarchical": "hierarchical:2"}
STEPS, LR = 25, 0.4


@pytest.fixture(scope="module")
def gloo() -> Iterator[GlooGroup]:
    with GlooGroup(max(RANKS), timeout_s=60) as group:
        yield group


def data_plane_results(name: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    schedule = build_schedule(SPECS.get(name, name), len(arrays), len(arrays[0]))
    return run_schedule(schedule, arrays).arrays


@pytest.mark.torch
@requires_torch
@pytest.mark.parametrize("p", RANKS)
def test_gloo_int_all_reduce_equals_every_algorithm_exactly(p: int, gloo: GlooGroup) -> None:
    rng = np.random.default_rng(p)
    n = 8 * p + 5  # uneven chunks
    arrays = [rng.integers(-(2**40), 2**40, size=n, dtype=np.int64) for _ in range(p)]
    got = gloo.all_reduce(arrays)
    assert len(got) == p
    want = np.sum(arrays, axis=0)
    for rank_result in got:
        assert rank_result.dtype == np.int64
        np.testing.assert_array_equal(rank_result, want)
    for name in ALGORITHMS:
        for rank, plane in enumerate(data_plane_results(name, arrays)):
            np.testing.assert_array_equal(plane, got[rank], err_msg=f"{name} rank {rank}")


@pytest.mark.torch
@requires_torch
@pytest.mark.parametrize(("dtype", "rtol"), [(np.float64, 1e-13), (np.float32, 1e-5)])
@pytest.mark.parametrize("p", RANKS)
def test_gloo_float_all_reduce_equals_every_algorithm_to_rounding(
    p: int, dtype: type[np.floating], rtol: float, gloo: GlooGroup
) -> None:
    rng = np.random.default_rng(100 + p)
    arrays = [rng.normal(size=6 * p + 1).astype(dtype) for _ in range(p)]
    got = gloo.all_reduce(arrays)
    scale = np.sum(np.abs(arrays), axis=0)  # bounds the rounding error of any summation order
    for name in ALGORITHMS:
        for rank, plane in enumerate(data_plane_results(name, arrays)):
            assert plane.dtype == got[rank].dtype == dtype
            assert np.all(np.abs(plane - got[rank]) <= rtol * scale), f"{name} rank {rank}"


@pytest.mark.torch
@requires_torch
@pytest.mark.parametrize("kind", ["logistic", "linear"])
@pytest.mark.parametrize(("p", "num_samples"), [(2, 100), (3, 101), (4, 101)])
def test_ddp_training_matches_parplan_training(kind: Kind, p: int, num_samples: int, gloo: GlooGroup) -> None:
    X, y = make_regression(num_samples, 4, kind=kind, seed=7)  # 101 samples: uneven shards
    ddp = gloo.train_regression(X, y, p, kind=kind, steps=STEPS, learning_rate=LR)
    assert len(ddp) == p
    for w in ddp[1:]:
        np.testing.assert_array_equal(w, ddp[0])  # DDP keeps the replicas bitwise in sync
    reference = train_full_batch(X, y, kind=kind, steps=STEPS, learning_rate=LR)
    assert np.linalg.norm(reference) > 0.1  # it learned something, so the comparison means something
    # Only the order of floating-point additions differs: float64 rounding over 25 steps.
    np.testing.assert_allclose(ddp[0], reference, rtol=1e-10, atol=1e-12)
    for w in train_threaded(X, y, p, kind=kind, steps=STEPS, learning_rate=LR):
        np.testing.assert_allclose(ddp[0], w, rtol=1e-10, atol=1e-12)
    ring = schedule_reducer(build_schedule("ring", p, X.shape[1] + 1))
    for w in train_data_parallel(X, y, p, ring, kind=kind, steps=STEPS, learning_rate=LR):
        np.testing.assert_allclose(ddp[0], w, rtol=1e-10, atol=1e-12)


@pytest.mark.torch
@requires_torch
def test_time_all_reduce_gives_a_time_per_repetition(gloo: GlooGroup) -> None:
    times = gloo.time_all_reduce(1024, num_ranks=2, reps=3, warmup=1)
    assert len(times) == 3
    assert all(0 < t < 60 for t in times)


@pytest.mark.torch
@requires_torch
def test_group_rejects_bad_requests(gloo: GlooGroup) -> None:
    with pytest.raises(RuntimeCheckError, match="4 ranks; cannot run on 5"):
        gloo.all_reduce([np.zeros(3)] * 5)
    with pytest.raises(RuntimeCheckError, match="share one shape and dtype"):
        gloo.all_reduce([np.zeros(3), np.zeros(4)])
    # The group still works after refused requests (nothing was sent).
    np.testing.assert_array_equal(gloo.all_reduce([np.ones(2), np.ones(2)])[1], [2.0, 2.0])


@pytest.mark.torch
@requires_torch
def test_one_shot_functions_spawn_and_clean_up() -> None:
    import multiprocessing

    before = {c.pid for c in multiprocessing.active_children()}  # the module's shared group, if up
    got = run_gloo_allreduce([np.arange(4), 10 * np.arange(4)], timeout_s=60)
    assert len(got) == 2
    for rank_result in got:
        np.testing.assert_array_equal(rank_result, 11 * np.arange(4))
    assert {c.pid for c in multiprocessing.active_children()} <= before  # its workers are gone


@pytest.mark.torch
@requires_torch
def test_worker_failure_is_reported_and_the_group_shut_down() -> None:
    import multiprocessing

    before = {c.pid for c in multiprocessing.active_children()}
    group = GlooGroup(2, timeout_s=30)
    objects = np.array([None, 1], dtype=object)  # torch cannot take object arrays: the workers fail
    with pytest.raises(RuntimeCheckError, match=r"worker rank \d failed:(.|\n)*TypeError"):
        group.all_reduce([objects, objects])
    assert {c.pid for c in multiprocessing.active_children()} <= before
    with pytest.raises(RuntimeCheckError, match="closed"):
        group.all_reduce([np.zeros(1), np.zeros(1)])


def test_missing_torch_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import torch` raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    hint = r"needs the torch extra: pip install 'parplan\[torch\]'"
    with pytest.raises(RuntimeCheckError, match=hint):
        run_gloo_allreduce([np.zeros(2), np.zeros(2)])
    X, y = make_regression(8, 2, seed=0)
    with pytest.raises(RuntimeCheckError, match=hint):
        train_ddp_regression(X, y, 2)
    with pytest.raises(RuntimeCheckError, match=hint):
        GlooGroup(2)

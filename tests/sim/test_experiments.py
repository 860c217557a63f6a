"""A tiny run of the experiments CLI writes results.json and the figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.experiments.__main__ import main
from sim.experiments.runner import moving_average, running_average, summarise


def test_curves():
    r = np.array([[1.0, 3.0, 2.0, 6.0]])
    np.testing.assert_allclose(running_average(r), [[1.0, 2.0, 2.0, 3.0]])
    np.testing.assert_allclose(moving_average(r, 2), [[1.0, 2.0, 2.5, 4.0]])
    s = summarise(np.vstack([r, r + 1.0]), window=2, span=(1, 4))
    assert s["span"] == [0, 4] and s["runs"] == 2


@pytest.mark.slow
def test_icc2021_tiny_run_writes_json_and_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    assert main(["icc2021", "--out", str(tmp_path), "--runs", "2", "--iterations", "200",
                 "--jobs", "1"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    scen = results["icc2021"]["scenarios"]
    assert set(scen) == {"icc2021-single", "icc2021-groups"}
    for summary in scen.values():
        assert {"uniform", "thompson", "dqn", "oracle"} <= set(summary)
        for fig in summary.values():
            assert fig["runs"] == 2 and fig["iterations"] == 200
            assert np.isfinite(fig["running_average_final"])
    for name in ("icc2021-single", "icc2021-groups"):
        for kind in ("running", "moving"):
            png = tmp_path / f"{name}_{kind}.png"
            assert png.stat().st_size > 1000
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_allerton_tiny_run(tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["allerton2019", "--out", str(tmp_path), "--runs", "2", "--iterations", "60",
                 "--jobs", "1", "--policies", "oracle,lspe,thompson-whittle"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    summary = results["allerton2019"]["scenarios"]["allerton2019"]
    assert summary["oracle"]["span_ratio_to_oracle"] == 1.0
    assert (tmp_path / "allerton2019_running.png").exists()


def test_dqn_devices_on_the_cpu_repeats_itself_and_resumes_from_a_checkpoint():
    """The device comparison (run on a GPU machine for docs/experiments.md) on the CPU alone:
    two runs with one seed decide the same, and a checkpoint taken half-way (after training
    started) and loaded into a policy of another seed goes on as the uninterrupted run."""
    torch = pytest.importorskip("torch")
    from sim.experiments.dqn_devices import dqn_devices

    # one torch thread, as in tests/core/test_dqn.py: the networks are tiny, and torch's
    # default of a thread per core fights whatever else runs on a 2-core machine (the other
    # pytest-xdist worker, a crawl's processes) for the cores, which slows the run manyfold
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = dqn_devices(["cpu"], slots=200)
    finally:
        torch.set_num_threads(before)
    for name in ("icc2021-single", "icc2021-groups"):
        out = report["scenarios"][name]
        assert out["cpu"]["updates"] > 0 and out["cpu"]["repeats_itself"]
        resumed = out["checkpoint_cpu_to_cpu"]
        assert resumed["updates_before"] > 0          # a trained network was saved
        assert resumed["first_difference_from_uninterrupted_cpu"] is None

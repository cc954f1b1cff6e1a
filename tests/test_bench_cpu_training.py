"""The demo's allocator settings change no digit of a training step (benchmarks/bench_cpu_training.py)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cpu_training.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_cpu_training", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_demo_environment_trains_the_same_weights_as_glibc_defaults(capsys):
    bench = _bench()
    rows = ["glibc defaults, 1 thread", "demo environment, 1 thread"]
    results = bench.measure(steps=2, warmup=1, rounds=1, rows=rows)
    reference, demo = (results[name][0] for name in rows)
    # Two steps of real speech move the weights: equal digests are equal numbers, not an untrained model.
    assert reference["digest"] == demo["digest"] != reference["initial_digest"]
    assert reference["threads"] == demo["threads"] == 1
    bench.report(results)
    table = capsys.readouterr().out
    assert "| demo environment, 1 thread |" in table and "(= reference)" in table


def test_each_row_gets_its_environment(monkeypatch):
    bench = _bench()
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "5")  # the reference row must not inherit it
    _, environment = bench.demo_settings()
    rows = bench.variants(environment)
    assert "MALLOC_TRIM_THRESHOLD_" not in rows["glibc defaults, 1 thread"]
    assert (
        rows["demo environment, 1 thread"]["MALLOC_TRIM_THRESHOLD_"] == environment["MALLOC_TRIM_THRESHOLD_"]
    )
    assert rows["demo environment, 2 threads"]["OMP_NUM_THREADS"] == "2"

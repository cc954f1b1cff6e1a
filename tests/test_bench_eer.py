"""benchmarks/bench_eer.py --part privacy runs in the dev install (issue 32, privacy 1): it needed lir, which
no extra installs, and stopped with ModuleNotFoundError after timing. Small lists here: speed is the
benchmark's business, not the test's."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_eer.py"


def test_the_privacy_part_runs_without_lir_and_prints_ours_beside_the_references(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("bench_eer", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setitem(sys.modules, "lir", None)  # `import lir` fails, as in a clean dev install
    monkeypatch.setattr(bench.os, "sched_setaffinity", lambda *args: None)  # the test process keeps its cores
    monkeypatch.setattr(bench, "CHALLENGE_LISTS", {"dev_f": (11, 22, 10), "dev_m": (11, 33, 10)})
    assert bench.main(["--part", "privacy", "--resamples", "5"]) == 0
    out = capsys.readouterr().out
    assert "  total" in out and "target <= 10 s: met" in out  # ours
    assert (
        "references, one evaluation of the 4 lists" in out
        and "legal_eval pi_link + Singling Out sweeps" in out
    )
    assert "lir not installed" in out and "ours: " in out and "x less" in out  # beside the references'

"""The prepared GPU benchmark runs end to end (here on the CPU, with small models)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


def test_gpu_benchmark_smoke_on_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "gpu.json"
    figures = bench.main(
        ["--device=cpu", "--tiny", "--batch=4", "--steps=1", "--whisper_batches=1,2", f"--out={out}"]
    )
    assert out.is_file()
    for precision in ("fp32", "bf16"):
        assert figures["ecapa"][precision]["samples_per_s"] > 0
    assert figures["whisper"]["batch1"]["rtf"] > 0 and figures["whisper"]["batch2"]["gpu_hours_7_systems"] > 0
    assert figures["whisper"]["encoder_utterances_per_s"] > 0

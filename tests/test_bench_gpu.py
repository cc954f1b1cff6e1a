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
        [
            "--device=cpu",
            "--tiny",
            "--batch=4",
            "--steps=1",
            "--whisper_batches=1,2",
            "--ssl_batch=2",
            "--ssl_steps=1",
            f"--out={out}",
        ]
    )
    assert out.is_file()
    for precision in ("fp32", "bf16"):
        assert figures["ecapa"][precision]["samples_per_s"] > 0
    whisper = figures["whisper"]
    for backend in ("faster-whisper", "transformers"):
        assert set(whisper[backend]) == {"batch1", "batch2"}
        for row in whisper[backend].values():
            # GPU-hours are the real-time factor scaled to 7 systems x 363 h.
            assert row["rtf"] > 0 and abs(row["gpu_hours_7_systems"] - 7 * 363 * row["rtf"]) < 1e-9
    assert whisper["openai-whisper"]["batch1"]["rtf"] > 0
    assert whisper["target"]["verdict"] == "unmeasured (no GPU)"  # a CPU run never claims the GPU target
    assert whisper["encoder_utterances_per_s"] > 0
    ssl = figures["ecapa_ssl"]
    for name in ("fp32", "bf16", "bf16_toolkit_window"):
        assert ssl[name]["samples_per_s"] > 0
    assert ssl["target"]["verdict"] == "unmeasured (no GPU)"

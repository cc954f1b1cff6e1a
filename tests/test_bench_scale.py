"""The scale benchmarks run end to end on a small layout (figures are not checked: speed lives in benchmarks/)."""

import importlib.util
import sys
from pathlib import Path

import pytest

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data.kaldi import read_kaldi_map, read_wav_scp

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _module(name):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scale_layout_points_at_the_demo_audio_with_its_alignments(tmp_path):
    layout = _module("scale_layout")
    folder, cache = layout.build_scale_layout(tmp_path, utterances=1000, speakers=20)
    wav = read_wav_scp(folder / "wav.scp")
    utt2spk = read_kaldi_map(folder / "utt2spk")
    assert len(wav) == 1000 and set(wav) == set(utt2spk) and len(set(utt2spk.values())) == 20
    assert {Path(path).parent for path in wav.values()} == {(layout.DEMO_TRAIN / "wav").resolve()}
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".wav", ".ogg", ".flac")]  # nothing copied
    spk2utt = read_kaldi_map(folder / "spk2utt")
    assert sorted(u for utts in spk2utt.values() for u in utts.split()) == sorted(wav)
    demo_wav = {str(Path(p).resolve()): utt for utt, p in read_wav_scp(layout.DEMO_TRAIN / "wav.scp").items()}
    ours, demo = (
        load_alignments(cache, use_index=False),
        load_alignments(layout.DEMO_ALIGNMENTS, use_index=False),
    )
    assert sorted(ours.ids) == sorted(wav)
    for utt in list(wav)[::97]:
        source = demo_wav[wav[utt]]
        assert ours.duration(utt) == demo.duration(source)
        assert [a.tolist() for a in ours.spans(utt)] == [a.tolist() for a in demo.spans(source)]


def test_bench_scale_prints_every_stage(capsys, tmp_path):
    bench = _module("bench_scale")
    bench.main(
        ["--utterances=400", "--speakers=20", "--order-utterances=2", f"--keep={tmp_path / 'run'}"]
        + ["--formats", "ogg", "wav"]
    )
    printed = capsys.readouterr().out
    for line in (
        "load from the index",
        "repair counts (first load / index)",
        "audio check + dev split + manifests",
        "start-up to the first training batch",
        "2 worker(s)",
        "worker 1: memory beyond the main process's",
        "from_csv (reference) dataset",
        "implied for 104,014 utterances",
        "with AS-norm",
        "training DataLoader, the demo's Ogg Vorbis",
        "training DataLoader, WAV, 16-bit",
        "worker cores a GPU at 600 crops/s needs",
    ):
        assert line in printed
    assert "must be equal: OK" in printed  # the index gives the parse's repair counts
    assert "DIFFERENT" not in printed


def test_bench_pipeline_samples_a_folder(vpac_root, capsys):
    bench = _module("bench_pipeline")
    folder = vpac_root / "B3" / "data" / "train-clean-360_B3"
    bench.main(
        [f"--folder={folder}", f"--alignments={vpac_root / 'alignments' / 'B3.jsonl'}", "--utterances=4"]
    )
    printed = capsys.readouterr().out
    assert "(a sample): 4 utterances" in printed and "ratio (target >= 0.8)" in printed
    with pytest.raises(SystemExit):
        bench.main([f"--folder={folder}"])  # --alignments is required with --folder

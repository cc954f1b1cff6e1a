"""``run_demo.py --attackers``: the original training speech it pretrains on, and the attacker table end to end."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

from segreconcat_aug.data.kaldi import load_kaldi_folder

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "demo" / "data"
spec = importlib.util.spec_from_file_location("run_demo", REPO / "recipes" / "run_demo.py")
run_demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_demo)


def test_the_original_speech_is_the_anonymized_training_set_before_anonymization():
    original = load_kaldi_folder(DATA / "ORIGINAL" / "data" / "train-clean-360_ORIGINAL")
    anonymized = load_kaldi_folder(DATA / "MCADAMS" / "data" / "train-clean-360_MCADAMS")
    assert sorted(original.utterances) == sorted(anonymized.utterances) and len(original.utterances) == 338
    assert original.utt2spk == anonymized.utt2spk
    size = sum(path.stat().st_size for path in (DATA / "ORIGINAL").rglob("*") if path.is_file())
    assert size < 6_000_000  # shipped in the repository: Ogg/Opus at about 9 kbit/s
    first = sorted(original.utterances)[0]
    info = soundfile.info(original.wav[first])
    assert (info.format, info.subtype, info.samplerate) == ("OGG", "OPUS", 16000)
    # Same lengths as the anonymized copies (McAdams keeps the length): the same utterances.
    assert abs(info.duration - soundfile.info(anonymized.wav[first]).duration) < 0.05


@pytest.mark.xdist_group("quick_demo")  # one worker builds the session's quick demo
def test_attackers_quick_prints_every_row_with_intervals_and_the_pairs(tmp_path, quick_demo):
    out = tmp_path / "attackers"
    # The two from-scratch rows run the quick demo's commands: its finished runs, skipped as on a rerun.
    for config in ("baseline", "rr_concat"):
        shutil.copytree(quick_demo[0] / "MCADAMS" / config, out / "MCADAMS" / config)
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "recipes" / "run_demo.py"),
            "--attackers",
            "--quick",
            f"--output_folder={out}",
            "--bootstrap_resamples=200",
            # The pretraining and both fine-tunings on the quick demo's quarter of the speakers.
            "--train_fraction=0.25",
            "--train_subsample=speakers",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| MCADAMS")]
    labels = [
        cells[2].strip().rstrip(" †")
        for cells in (line.split("|") for line in rows)
        if len(cells) > 8 and "[" in cells[8]
    ]
    assert labels[:6] == [
        "From scratch + SegReConcat (the paper's attacker)",
        "From scratch",
        "Pretrained on original speech, not fine-tuned",
        "Fine-tuned",
        "Fine-tuned + SegReConcat",
        "Fine-tuned + SegReConcat + AS-norm",
    ]
    pairs = (out / "table_pairs.md").read_text()
    assert "| MCADAMS | From scratch + SegReConcat (the paper's attacker) | From scratch |" in pairs
    assert "| MCADAMS | Fine-tuned + SegReConcat | Fine-tuned |" in pairs
    export = out / "pretrained" / "export"
    assert "pretraining on the original speech:" in run.stdout and "--system=ORIGINAL" in run.stdout
    assert (out / "pretrained" / "pretrain.log").stat().st_size > 0
    assert "MCADAMS/baseline: skipped" in run.stderr and "MCADAMS/rr_concat: skipped" in run.stderr
    assert f"--init_from={export}" in (out / "MCADAMS" / "ft_concat" / "grid_train.log").read_text()
    assert not (out / "MCADAMS" / "pretrained" / "grid_train.log").exists()  # evaluated as it is
    assert not (out / "MCADAMS" / "ft_concat_asnorm" / "grid_train.log").exists()  # ft_concat's model
    logged = (out / "MCADAMS" / "ft_concat_asnorm" / "grid_eval.log").read_text()
    assert f"--eval_model_folder={(out / 'MCADAMS' / 'ft_concat' / 'export').as_posix()}" in logged
    assert "--eval_score_norm=as-norm-voxattack" in logged
    # init_from on the folder the demo pretrains: the fine-tuned model started from those weights, so after
    # one epoch at a low rate it is still close to them (a random start would be uncorrelated).
    import torch

    before = torch.load(export / "embedding_model.ckpt", map_location="cpu")
    after = torch.load(out / "MCADAMS" / "ft_none" / "export" / "embedding_model.ckpt", map_location="cpu")
    weights = [name for name, value in before.items() if value.dim() >= 2]
    correlations = [
        torch.corrcoef(torch.stack([before[name].flatten().float(), after[name].flatten().float()]))[
            0, 1
        ].item()
        for name in weights
    ]
    assert weights and min(correlations) > 0.5, correlations

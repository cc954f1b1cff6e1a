"""segreconcat_aug.training.augmenter: SegReConcat and the training audio pipeline built from the training YAML."""

from pathlib import Path

import numpy as np
import pytest
from hyperpyyaml import load_hyperpyyaml

from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.training.augmenter import build_augmenter, build_train_audio

REPO = Path(__file__).resolve().parents[1]
HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"


@pytest.mark.parametrize("rr_redraw", ["once", "epoch"])
def test_the_yaml_builds_the_augmenter_and_pipeline_its_yaml_asks_for(vpac_root, tmp_path, rr_redraw):
    """What build_train_audio wires from the YAML, and what the pipeline it builds draws across epochs."""
    overrides = {
        "data_folder": str(vpac_root),
        "output_folder": str(tmp_path),
        "channels": [8, 8, 8, 8, 24],
        "rr_redraw": rr_redraw,
        "sentence_len": 60.0,  # longer than any augmented signal: the crop is all of it
        "seed": 7,
        "crossfade": 0.005,
        "segment_policy": "cover",
    }
    with open(HPARAMS) as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    augmenter, train_audio = build_train_audio(hparams)
    assert train_audio.augmenter is augmenter
    assert (augmenter.rr_redraw, augmenter.mode, augmenter.strategy.name) == (rr_redraw, "concat", "random")
    assert (augmenter.seed, augmenter.crossfade_samples, augmenter.segment_policy) == (7, 80, "cover")
    assert (train_audio.seed, train_audio.crop_samples, train_audio.read_errors) == (7, 60 * 16000, "skip")
    folder = vpac_root / "T8-5/data/train-clean-360_T8-5"
    utt, path = next(
        (utt, path)
        for utt, path in read_kaldi_map(folder / "wav.scp").items()
        if len(augmenter.alignments.spans(utt)[0]) >= 8  # enough words that two draws differ
    )
    signals = []
    for epoch in (1, 2):
        train_audio.set_epoch(epoch)
        signals.append(train_audio(f"{utt}@0", utt, str(vpac_root / path)).numpy())
    assert len(signals[0]) == len(signals[1]) > 16000
    assert np.array_equal(signals[0], signals[1]) == (rr_redraw == "once")


def test_the_baseline_has_no_augmenter_and_its_pipeline_only_crops(tmp_path):
    with open(HPARAMS) as fin:
        hparams = load_hyperpyyaml(
            fin, {"data_folder": str(tmp_path), "output_folder": str(tmp_path), "mode": "none"}
        )
    augmenter, train_audio = build_train_audio(hparams)
    assert augmenter is None and train_audio.augmenter is None and build_augmenter(hparams) is None
    assert train_audio.crop_samples == hparams["sentence_len"] * hparams["sample_rate"]

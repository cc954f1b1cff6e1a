"""The training manifest in arrays: the same rows and dataset items as SpeechBrain's CSV loader."""

import pytest
import speechbrain as sb
import torch

from segreconcat_aug.training.data_prep import PrepOptions, prepare_vpac_training
from segreconcat_aug.training.manifest import ManifestDataset, ManifestError, read_manifest
from segreconcat_aug.training.pipeline import TrainAudioPipeline


@pytest.fixture(scope="module")
def manifest(vpac_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("prep")
    return prepare_vpac_training(
        vpac_root, "B3", out, PrepOptions(mode="concat", sentence_len=2.0, dev_ratio=0.1)
    )["train"]


def test_rows_are_the_csv_loaders(manifest):
    expected = sb.dataio.dataio.load_data_csv(manifest)
    rows = read_manifest(manifest)
    assert list(rows.ids) == list(expected) and len(rows) == len(expected)
    assert all(rows.row(k) == (utt, expected[utt]) for k, utt in enumerate(expected))
    assert dict(rows) == expected  # the mapping interface, by id
    assert rows.distinct("spk_id") == sorted({row["spk_id"] for row in expected.values()})
    assert rows.ids[-1] == list(expected)[-1] and rows.ids[:2] == list(expected)[:2]


def test_dataset_items_are_dynamic_item_datasets(manifest):
    """With the recipe's audio pipeline (SegReConcat off), the same ids, labels and signals."""
    audio = TrainAudioPipeline(None, sentence_len=2.0)
    datasets = [
        ManifestDataset(read_manifest(manifest)),
        sb.dataio.dataset.DynamicItemDataset.from_csv(manifest),
    ]
    for dataset in datasets:
        sb.dataio.dataset.add_dynamic_item([dataset], audio.dynamic_item())
        sb.dataio.dataset.set_output_keys([dataset], ["id", "sig", "spk_id", "duration"])
    ours, theirs = datasets
    assert len(ours) == len(theirs)
    for k in range(0, len(ours), 7):
        mine, reference = ours[k], theirs[k]
        assert mine["id"] == reference["id"] and mine["spk_id"] == reference["spk_id"]
        assert mine["duration"] == reference["duration"]
        assert torch.equal(mine["sig"], reference["sig"])


@pytest.mark.parametrize(
    "text, message",
    [
        ("utt_id,wav\nu1,a.wav\n", r"m\.csv: not a manifest \(no header with an ID column\)"),
        ("ID,utt_id\nu1@0,u1\nu1@0,u1\n", r"m\.csv:3: duplicate ID 'u1@0'"),
        ("ID,utt_id,wav\nu1@0,u1\n", r"m\.csv:2: 2 fields, the header has 3"),
        ("ID,duration\nu1@0,long\n", r"m\.csv: column 'duration' holds a value that is not a number"),
        ("ID,utt_id\n", r"m\.csv: no rows"),
    ],
)
def test_malformed_manifest_names_file_and_line(tmp_path, text, message):
    path = tmp_path / "m.csv"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        read_manifest(path)

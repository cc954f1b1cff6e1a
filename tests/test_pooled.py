"""Pooled training sets WITH SegReConcat (``train_systems`` + ``mode: concat``): each row is augmented with
its own system's alignments (segreconcat_aug.training.pooled), end to end through recipes/train.py."""

import csv
import json
import subprocess
import sys

import pytest
import torch
from test_train import HPARAMS, RECIPE, SUBPROCESS_ENV, _args, _epochs, train_recipe

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data.vpac import VPACLayoutError
from segreconcat_aug.errors import MissingInputError
from segreconcat_aug.method.augment import MissingAlignmentError, SegReConcat
from segreconcat_aug.options import TrainingRunOptions, validate_hparams_file
from segreconcat_aug.training.augmenter import build_train_audio
from segreconcat_aug.training.data_prep import PrepOptions, prepare_pooled_training
from segreconcat_aug.training.pipeline import TrainAudioPipeline
from segreconcat_aug.training.pooled import PooledCachesError, PooledSegReConcat


def _merged_pairs_cache(source, target, drop_first=False):
    """Another system's alignments of the same utterances: every two words merged into one span (as a
    different anonymizer's Whisper timestamps would cut them), optionally without the first utterance."""
    lines = source.read_text().splitlines()[1 if drop_first else 0 :]
    with open(target, "w") as out:
        for line in lines:
            record = json.loads(line)
            words = record["words"]
            record["words"] = [
                {
                    "word": " ".join(w["word"] for w in words[k : k + 2]),
                    "start": words[k]["start"],
                    "end": words[min(k + 1, len(words) - 1)]["end"],
                }
                for k in range(0, len(words), 2)
            ]
            out.write(json.dumps(record) + "\n")
    return target


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _augmenter_keys(root, caches):
    return {
        "mode": "concat",
        "strategy": "random",
        "segment_policy": "authors",
        "crossfade": 0.0,
        "seed": 11,
        "sample_rate": 16000,
        "missing_alignment": "error",
        "min_leading_silence": 0.0,
        "rr_redraw": "once",
        "sr_pad_normalize": True,
        "sentence_len": 60.0,
        "system": "T8-5",
        "train_systems": ["B3"],
        "alignment_cache": root / "alignments" / "T8-5.jsonl",
        "train_system_caches": caches,
    }


def test_each_pooled_row_is_augmented_as_its_own_systems_run_would(vpac_root, tmp_path):
    b3_cache = _merged_pairs_cache(vpac_root / "alignments" / "B3.jsonl", tmp_path / "B3.jsonl")
    prepared = prepare_pooled_training(
        vpac_root, ["T8-5", "B3"], tmp_path / "prep", PrepOptions(sentence_len=2.0)
    )
    augmenter, pooled = build_train_audio(_augmenter_keys(vpac_root, {"B3": {"alignment_cache": b3_cache}}))
    assert isinstance(augmenter, PooledSegReConcat) and augmenter.systems == ["T8-5", "B3"]
    assert pooled.dynamic_item().takes == ("id", "utt_id", "wav", "system")

    def alone(cache):  # the run on one system: its own alignments, the same seed, crops and epoch
        single = TrainAudioPipeline(SegReConcat(load_alignments(cache), seed=11), sentence_len=60.0, seed=11)
        single.set_epoch(2)
        return single

    t85, b3 = alone(vpac_root / "alignments" / "T8-5.jsonl"), alone(b3_cache)
    pooled.set_epoch(2)
    differs = 0
    rows = _rows(prepared["train"])
    assert {row["system"] for row in rows} == {"T8-5", "B3"}
    for row in rows:
        crop = pooled(row["ID"], row["utt_id"], row["wav"], row["system"])
        own = (t85 if row["system"] == "T8-5" else b3)(row["ID"], row["utt_id"], row["wav"])
        assert torch.equal(crop, own), row["ID"]
        if row["system"] == "B3":
            other = t85(row["ID"], row["utt_id"], row["wav"])  # B3's audio cut by T8-5's words
            differs += crop.shape != other.shape or not torch.equal(crop, other)
    assert differs > 0  # B3's rows really were cut by B3's words, not T8-5's
    # The pipeline counts each row under its own system.
    assert pooled.counts()["augmented"] == len(rows)
    assert "T8-5: augmented=" in pooled.report() and "B3: augmented=" in pooled.report()


def test_pooled_segreconcat_trains_through_the_recipe_with_each_systems_default_cache(vpac_root, tmp_path):
    out = tmp_path / "out"
    args = _args(vpac_root, out, "--train_systems=[B3]", "--number_of_epochs=1", "--warmup=0")
    # Each other system's caches are the YAML's, with system set to it.
    values = validate_hparams_file(
        HPARAMS, {"data_folder": str(vpac_root), "train_systems": ["B3"]}, TrainingRunOptions
    )
    derived = train_recipe.derive_overrides(
        HPARAMS, values, {"data_folder": str(vpac_root), "train_systems": ["B3"]}
    )
    assert derived["train_system_caches"]["B3"]["alignment_cache"] == f"{vpac_root}/alignments/B3.jsonl"
    torch.set_num_threads(1)
    train_recipe.main(args)
    (epoch,) = _epochs(out)
    assert epoch["train"]["augmented"] == epoch["train"]["samples"] > 0
    assert {row["system"] for row in _rows(out / "train.csv")} == {"T8-5", "B3"}
    log = (out / "log.txt").read_text()
    assert "T8-5: augmented=" in log and "B3: augmented=" in log


def test_pooled_segreconcat_refuses_a_shared_missing_or_partial_cache(vpac_root, tmp_path):
    own, b3 = vpac_root / "alignments" / "T8-5.jsonl", vpac_root / "alignments" / "B3.jsonl"
    # --alignment_cache on the command line is the attacked system's: B3 would read it too. One line, exit 2.
    out = tmp_path / "shared"
    done = subprocess.run(
        [
            sys.executable,
            str(RECIPE),
            *_args(vpac_root, out, "--train_systems=[B3]", f"--alignment_cache={own}"),
        ],
        capture_output=True,
        text=True,
        env=SUBPROCESS_ENV,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{own} is the cache of both T8-5 and B3" in line and "--train_system_caches" in line
    assert not out.exists()  # refused before anything was written
    # A pooled system's cache that is not there, and a system that is not pooled: named, nothing written.
    missing = tmp_path / "nowhere.jsonl"
    with pytest.raises(MissingInputError, match="alignment cache of pooled system B3"):
        train_recipe.main(
            _args(
                vpac_root,
                tmp_path / "m",
                "--train_systems=[B3]",
                f"--train_system_caches={{B3: {{alignment_cache: {missing}}}}}",
            )
        )
    with pytest.raises(PooledCachesError, match=r"\['B9'\] is not pooled with T8-5"):
        train_recipe.main(
            _args(
                vpac_root,
                tmp_path / "u",
                "--train_systems=[B3]",
                f"--train_system_caches={{B3: {{alignment_cache: {b3}}}, B9: {{alignment_cache: {b3}}}}}",
            )
        )
    # A pooled system the data folder lacks is named as such, not as its missing alignment cache.
    with pytest.raises(
        VPACLayoutError, match=r"^train_systems: system 'B9' has no training set: .*'B9' not found"
    ):
        train_recipe.main(_args(vpac_root, tmp_path / "b9", "--train_systems=[B9]"))
    assert not (tmp_path / "m").exists() and not (tmp_path / "u").exists() and not (tmp_path / "b9").exists()
    # B3's cache lacks one training utterance: the refusal names the system, before any epoch.
    partial = _merged_pairs_cache(
        vpac_root / "alignments" / "B3.jsonl", tmp_path / "B3.jsonl", drop_first=True
    )
    with pytest.raises(
        MissingAlignmentError, match=r"pooled system B3: 1 of \d+ training utterances have no alignment"
    ):
        train_recipe.main(
            _args(
                vpac_root,
                tmp_path / "p",
                "--train_systems=[B3]",
                f"--train_system_caches={{B3: {{alignment_cache: {partial}}}}}",
            )
        )
    assert _epochs(tmp_path / "p") == []


def test_ar_and_sr_need_each_pooled_systems_own_order_cache(vpac_root, tmp_path):
    """A precomputed strategy (AR, SR) reads an order cache per pooled system as well, checked like the alignments."""
    from segreconcat_aug.training.pooled import check_pooled_caches

    orders = {name: tmp_path / f"{name}-acoustic.jsonl" for name in ("T8-5", "B3")}
    for path in orders.values():
        path.write_text("")
    b3_alignments = str(vpac_root / "alignments" / "B3.jsonl")
    values = {
        "system": "T8-5",
        "train_systems": ["B3"],
        "mode": "concat",
        "strategy": "acoustic",
        "alignment_cache": str(vpac_root / "alignments" / "T8-5.jsonl"),
        "orders_cache": str(orders["T8-5"]),
    }
    check_pooled_caches(
        {
            **values,
            "train_system_caches": {
                "B3": {"alignment_cache": b3_alignments, "orders_cache": str(orders["B3"])}
            },
        }
    )
    with pytest.raises(PooledCachesError, match="pooled system 'B3' has no orders_cache"):
        check_pooled_caches({**values, "train_system_caches": {"B3": {"alignment_cache": b3_alignments}}})
    with pytest.raises(PooledCachesError, match="is the cache of both T8-5 and B3"):
        check_pooled_caches(
            {
                **values,
                "train_system_caches": {
                    "B3": {"alignment_cache": b3_alignments, "orders_cache": str(orders["T8-5"])}
                },
            }
        )
    # Random rearrangement reads no orders: only the alignments are asked for.
    check_pooled_caches(
        {**values, "strategy": "random", "train_system_caches": {"B3": {"alignment_cache": b3_alignments}}}
    )

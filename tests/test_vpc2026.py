"""The VPC 2026 protocols end to end: prepare, train one tiny epoch, evaluate, report, from folders laid out
as the 2026 toolkit writes them (tests/vpc2026_fixture.py); and Track 1's lists on a VPAC 2024 layout."""

import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_train import TINY as TRAIN_TINY
from vpac_fixture import build_vpac_layout
from vpc2026_fixture import TRACK2_TRAIN, UNKNOWN_UTTERANCE, build_track1_layout, build_track2_layout

from segreconcat_aug.data.kaldi import read_trials
from segreconcat_aug.errors import UserError
from segreconcat_aug.evaluation.score_files import read_score_file
from segreconcat_aug.evaluation.system_report import read_results

REPO = Path(__file__).resolve().parents[1]
HPARAMS = str(REPO / "hparams" / "ecapa_segreconcat.yaml")
# The tiny-model settings of test_train.py, training one epoch and evaluating (with fewer resamples) after it.
TINY = [
    *(
        arg
        for arg in TRAIN_TINY
        if not arg.startswith(("--sentence_len", "--dev_ratio", "--evaluate_after_training"))
    ),
    "--number_of_epochs=1",
    "--eval_bootstrap_resamples=200",
]
MODEL = [arg for arg in TINY if arg.startswith(("--channels", "--lin_neurons", "--attention_channels"))]


def _recipe(name):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train_recipe = _recipe("train")


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _check_pooled_report(results, eval_folder, original_trials: dict):
    """What both tracks' reports must hold: the pooled lists, their gender rows, the average, intervals."""
    assert list(results["table"]) == ["dev_mixed", "test_mixed", "avg"]
    assert results["table"]["avg"] == pytest.approx(
        np.mean([results["table"]["dev_mixed"], results["table"]["test_mixed"]])
    )
    subsets = results["subsets"]
    assert set(subsets) == {
        f"{part}_mixed{row}" for part in ("dev", "test") for row in ("", "_same", "_cross")
    }
    for part in ("dev", "test"):
        pooled, same, cross = (subsets[f"{part}_mixed{row}"] for row in ("", "_same", "_cross"))
        assert pooled["target_trials"] == same["target_trials"] == cross["target_trials"]
        assert same["nontarget_trials"] + cross["nontarget_trials"] == pooled["nontarget_trials"]
        scored = read_score_file(eval_folder / "scores" / f"{part}_mixed.txt")
        listed = [(t.enroll_speaker, t.test_utterance) for t in original_trials[part]]
        kept = [pair for pair in listed if pair[1] != UNKNOWN_UTTERANCE]
        assert list(zip(scored.enroll, scored.test)) == kept  # the original folder's list, in its order
        assert pooled["skipped_trials"] == len(listed) - len(kept)
    intervals = results["intervals"]
    for column in ("dev_mixed", "dev_mixed_cross", "test_mixed", "avg"):
        assert intervals[column]["eer"]["low"] <= intervals[column]["eer"]["high"]
    assert results["options"]["normalize_wave"] == "vpc2026" and results["options"]["enroll_mean"] == "raw"
    assert results["options"]["layout"] == "vpc2026"


def test_track1_prepares_trains_evaluates_and_reports_from_the_2026_layout(tmp_path):
    torch.set_num_threads(1)
    root = build_track1_layout(tmp_path / "vpc2026")
    out = tmp_path / "out"
    argv = [
        HPARAMS,
        "--protocol=vpc2026-track1",
        f"--data_folder={root}",
        "--system=B3",
        f"--output_folder={out}",
    ]
    train_recipe.main([*argv, *TINY, "--sentence_len=2.0"])
    prepared = json.loads((out / "prep_summary.json").read_text())
    assert Path(prepared["folder"]) == root / "data" / "train-clean-360_B3"
    results = read_results(out / "eval")
    assert results["protocol"] == "vpc2026-track1" and results["language"] is None
    original = {
        part: read_trials(root / "data" / f"libri_{part}_trials_mixed" / "trials") for part in ("dev", "test")
    }
    _check_pooled_report(results, out / "eval", original)
    assert results["subsets"]["dev_mixed"]["skipped_trials"] == 1  # UNKNOWN_UTTERANCE, counted
    text = (out / "eval" / "results.md").read_text()
    assert "| system | dev mixed | test mixed | avg |" in text and "Skipped trials: 1 in all" in text
    assert "dev_mixed: 1 of 13 trials skipped" in text

    # The named option: L2-normalized enrollment averaging (the challenge's own attacker); same embeddings.
    rescored = _recipe("evaluate").main(
        [*argv, *MODEL, "--eval_enroll_mean=l2", f"--eval_folder={tmp_path / 'l2'}"]
    )
    assert (
        rescored.options["enroll_mean"] == "l2"
        and rescored.options["fingerprint"] == results["options"]["fingerprint"]
    )
    raw = read_score_file(out / "eval" / "scores" / "dev_mixed.txt").scores
    assert not np.allclose(rescored.subsets["dev_mixed"].scores, raw)


def test_track2_trains_one_attacker_per_language_from_the_2026_layout(tmp_path):
    torch.set_num_threads(1)
    root = build_track2_layout(tmp_path / "vpc2026", system="BM1", language="de")
    out = tmp_path / "out"
    base = [
        HPARAMS,
        "--protocol=vpc2026-track2",
        f"--data_folder={root}",
        "--system=BM1",
        f"--output_folder={out}",
    ]
    # Track 2 needs the attacker's language: refused in one line before anything is written.
    with pytest.raises(UserError, match="one attacker per language and got no language"):
        train_recipe.main([*base, *TINY])
    assert not out.exists()
    train_recipe.main([*base, "--language=de", *TINY, "--sentence_len=1.0"])
    speakers = {row["spk_id"] for row in _rows(out / "train.csv")}
    assert speakers == set(TRACK2_TRAIN)  # from utt2spk (MLS ids are <speaker>_<book>_<sequence>)
    assert Path(json.loads((out / "prep_summary.json").read_text())["folder"]).name == "train_german_BM1"
    results = read_results(out / "eval")
    assert results["protocol"] == "vpc2026-track2" and results["language"] == "de"
    original = {
        part: read_trials(root / "data" / f"de_{part}_trials_mixed" / "trials") for part in ("dev", "test")
    }
    _check_pooled_report(results, out / "eval", original)
    assert "# BM1 (de): EER (%)" in (out / "eval" / "results.md").read_text()
    # Another language into the same output folder would resume this attacker's checkpoints: refused.
    with pytest.raises(UserError, match="language: 'de' there, 'fr' now"):
        train_recipe.main([*base, "--language=fr", *TINY])


def test_track1_lists_built_for_a_vpac_2024_system_are_scored_in_its_layout(tmp_path):
    """A VPAC 2024 user: make_mixed_trials.py on the system's f/m lists, then --protocol=vpc2026-track1."""
    from test_evaluation import export_random_model, load_tiny_hparams, tiny_overrides

    from segreconcat_aug.evaluation.system import evaluate_system

    root = build_vpac_layout(tmp_path / "vpac", systems=("T8-5",), write_alignments=False)
    sys.path.insert(0, str(REPO / "recipes"))
    import make_mixed_trials

    made = make_mixed_trials.main(
        [str(REPO / "hparams" / "mixed_trials.yaml"), f"--data_folder={root}", "--system=T8-5"]
    )
    assert [p.name for p in made] == ["libri_dev_trials_mixed_T8-5", "libri_test_trials_mixed_T8-5"]
    hparams = load_tiny_hparams(
        tiny_overrides(root, tmp_path / "out", protocol="vpc2026-track1", eval_bootstrap_resamples=0)
    )
    export_random_model(hparams)
    # An evaluation folder holding the VPAC 2024 results of this attacker is not replaced.
    (tmp_path / "out" / "eval").mkdir()
    (tmp_path / "out" / "eval" / "results.json").write_text(json.dumps({"system": "T8-5", "table": {}}))
    with pytest.raises(UserError, match="holds results of protocol vpac2024; .* give another --eval_folder"):
        evaluate_system(hparams, {"device": "cpu"})
    hparams["eval_folder"] = tmp_path / "out" / "eval-vpc2026"
    results = evaluate_system(hparams, {"device": "cpu"})
    assert results.options["layout"] == "vpac2024" and results.protocol == "vpc2026-track1"
    f_list = read_trials(root / "T8-5" / "data" / "libri_dev_trials_f_T8-5" / "trials")
    m_list = read_trials(root / "T8-5" / "data" / "libri_dev_trials_m_T8-5" / "trials")
    pooled = results.metrics["dev_mixed"]
    assert pooled["target_trials"] == sum(t.target for t in f_list + m_list)
    # The same-gender row is exactly the f and m lists together; the cross-gender non-targets are the added ones.
    assert results.metrics["dev_mixed_same"]["nontarget_trials"] == sum(not t.target for t in f_list + m_list)
    assert results.metrics["dev_mixed_cross"]["nontarget_trials"] == pooled["nontarget_trials"] - sum(
        not t.target for t in f_list + m_list
    )

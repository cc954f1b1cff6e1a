"""Learning curves (issue 31): nested, seeded training subsets and the grid's curve, end to end on a tiny model."""

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest
from test_demo_verdict import _load
from test_grid import TINY_TRAINING

from segreconcat_aug.errors import OptionError
from segreconcat_aug.grid.learning_curve import curve_configurations, curve_verdict, half_fraction
from segreconcat_aug.grid.plan import grid_cells, load_grid
from segreconcat_aug.grid.results import verdict_lines
from segreconcat_aug.training.data_prep import PrepOptions, prepare_vpac_training
from segreconcat_aug.training.run_settings import saved_hparams

REPO = Path(__file__).resolve().parents[1]


run_grid = _load("run_grid")
run_demo = _load("run_demo")
TINY = {**TINY_TRAINING, "eval_privacy": False}  # one epoch of a tiny ECAPA-TDNN; no privacy metrics


def _column(path: Path, name: str) -> list[str]:
    with open(path, newline="") as handle:
        return [row[name] for row in csv.DictReader(handle)]


def _prepare(vpac_root, out, fraction, by, seed=1986, cache=None):
    prepare_vpac_training(
        vpac_root,
        "T8-5",
        out,
        PrepOptions(
            mode="none",
            sentence_len=2.0,
            dev_ratio=0.1,
            seed=seed,
            check_workers=2,
            audio_check_cache=cache,
            train_fraction=fraction,
            train_subsample=by,
        ),
    )
    return set(_column(out / "train.csv", "utt_id")), set(_column(out / "dev.csv", "utt_id")), out


def test_training_subsets_are_nested_seeded_and_reproducible(vpac_root, tmp_path):
    cache = tmp_path / "audio_check.jsonl"  # the files are decoded once for every preparation below
    prepare = lambda fraction, by, name, seed=1986: _prepare(  # noqa: E731
        vpac_root, tmp_path / name, fraction, by, seed, cache
    )
    full_train, full_dev, full = prepare(1.0, "utterances", "full")
    speakers = set(_column(full / "train.csv", "spk_id"))
    for by in ("utterances", "speakers"):
        quarter, quarter_dev, _ = prepare(0.25, by, f"{by}25")
        half, half_dev, half_folder = prepare(0.5, by, f"{by}50")
        assert quarter < half < full_train  # nested, and each smaller
        again, _, again_folder = prepare(0.5, by, f"{by}50-again")
        assert again == half  # reproducible: the same rows, in the same order
        assert (again_folder / "train.csv").read_bytes() == (half_folder / "train.csv").read_bytes()
        summary = json.loads((half_folder / "prep_summary.json").read_text())
        assert (summary["train_fraction"], summary["train_subsample"]) == (0.5, by)
        dropped = summary["short_utterances_dropped"] + summary["silent_utterances_dropped"]  # no row
        assert summary["train_utterances"] == len(half) + dropped and summary["train_hours"] > 0
        half_speakers = set(_column(half_folder / "train.csv", "spk_id"))
        if by == "utterances":  # every speaker kept, the same dev set (the same early-stopping target)
            assert half_speakers == speakers and quarter_dev == half_dev == full_dev
        else:  # fewer speakers, with all their utterances; their dev rows only
            assert half_speakers < speakers and half_dev <= full_dev and half_dev
            kept_rows = [u for u in full_train if u.split("-")[0] in half_speakers]
            assert set(kept_rows) == half
    # Another seed, another draw of the same size.
    other, _, _ = prepare(0.5, "utterances", "seed7", seed=7)
    same_seed, _, _ = prepare(0.5, "utterances", "utterances50-again")
    assert other != same_seed
    with pytest.raises(ValueError, match="train_fraction"):
        prepare(0.0, "utterances", "zero")


def test_the_grid_checks_and_expands_the_curve():
    grid = load_grid(REPO / "hparams" / "demo.yaml", {"learning_curve": True})
    assert [cell for cell in grid_cells(grid) if "@" in cell[1]] == [
        ("MCADAMS", "baseline@speakers25"),
        ("MCADAMS", "baseline@speakers50"),
        ("MCADAMS", "rr_concat@speakers25"),
        ("MCADAMS", "rr_concat@speakers50"),
    ]
    point = grid["configurations"]["rr_concat@speakers25"]
    assert (
        point["overrides"]
        == "--mode=concat --strategy=random --train_fraction=0.25 --train_subsample=speakers"
    )
    assert point["label"] == "SegReConcat (25 % speakers)"
    # A row is any configuration with overrides, a string or a mapping (an attacker grid's row).
    mapping = {"learning_curve": True, "comparison": {"baseline": "a"}, "learning_curve_fractions": [0.5]}
    mapping["configurations"] = {"a": {"overrides": {"init_from": "x"}}}
    assert curve_configurations(mapping)["a@utterances50"]["overrides"] == {
        "init_from": "x",
        "train_fraction": 0.5,
        "train_subsample": "utterances",
    }
    assert not [cell for cell in grid_cells(load_grid(REPO / "hparams" / "demo.yaml")) if "@" in cell[1]]
    for bad, message in (
        ({"learning_curve_fractions": [0.0, 1.0]}, "fractions in \\(0, 1\\]"),
        ({"learning_curve_fractions": [1.0]}, "a fraction below 1"),
        ({"learning_curve_subsample": ["words"]}, "learning_curve_subsample"),
        ({"learning_curve_configurations": ["nope"]}, "nope"),
        ({"learning_curve": "yes"}, "True or False"),
    ):
        with pytest.raises(OptionError, match=message):
            load_grid(REPO / "hparams" / "demo.yaml", {"learning_curve": True, **bad})
    assert half_fraction([0.25, 0.5, 1.0]) == 0.5 and half_fraction([0.2, 1.0]) == 0.2
    assert run_demo.split_arguments(["--learning_curve"])[0] == {"learning_curve"}


def test_the_verdict_says_still_improving_only_for_a_significant_drop():
    drop = {"difference": -3.0, "low": -5.0, "high": -1.0, "p_value": 0.01, "significant": True}
    assert "still improving: the EER at 100 % is 3.0 points lower than at 50 % [1.0, 5.0]" in curve_verdict(
        drop, "X"
    )
    rise = {"difference": 3.0, "low": 1.0, "high": 5.0, "p_value": 0.01, "significant": True}
    assert curve_verdict(rise, "X") == (
        "X: no significant gain from doubling the data: the EER at 100 % is 3.0 points higher than at 50 % "
        "[1.0, 5.0] (p = 0.01)"
    )
    assert "going from 25 % to 100 % of the data" in curve_verdict({**drop, "significant": False}, "X", 0.25)
    assert "no paired test (one speaker)" in curve_verdict(
        {"difference": -1.0, "low": None, "reason": "one speaker"}, "X"
    )


@pytest.fixture(scope="module")
def curve_grid(vpac_root, tmp_path_factory):
    """One learning-curve grid on a tiny model (50 % and 100 % of T8-5's utterances), shared by the tests below."""
    out = tmp_path_factory.mktemp("curve") / "grid"
    overrides = {
        "data_folder": str(vpac_root),
        "output_folder": str(out),
        "systems": ["T8-5"],
        "comparison": {"baseline": "baseline", "compared": []},
        "ablation": None,
        "extra_overrides": TINY,
        "learning_curve_fractions": [0.5, 1.0],
        "parallel": 2,
        "bootstrap_resamples": 200,
        "environment": {"OMP_NUM_THREADS": 1},
    }
    argv = [str(REPO / "hparams" / "grid.yaml")] + [f"--{k}={json.dumps(v)}" for k, v in overrides.items()]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run_grid.main([*argv, "--learning_curve"]) == 0
    return out, printed.getvalue()


def test_the_curve_grid_runs_end_to_end(curve_grid):
    out, printed = curve_grid
    half, full = out / "T8-5" / "baseline@utterances50", out / "T8-5" / "baseline"
    # Each point trained on its own nested subset (the 100 % point is the row's own cell), evaluated alike.
    assert set(_column(half / "train.csv", "utt_id")) < set(_column(full / "train.csv", "utt_id"))
    assert saved_hparams(half)["train_fraction"] == 0.5
    curves = json.loads((out / "learning_curve.json").read_text())
    curve = curves["T8-5"]["baseline"]["utterances"]
    assert [p["fraction"] for p in curve["points"]] == [0.5, 1.0]
    assert curve["points"][0]["hours"] < curve["points"][1]["hours"]
    assert curve["points"][0]["speakers"] == curve["points"][1]["speakers"] == 7
    for point, folder in zip(curve["points"], (half, full)):
        results = json.loads((folder / "eval" / "results.json").read_text())
        assert point["table"]["avg"] == pytest.approx(results["table"]["avg"])
        assert "best_epoch_last" in point["flags"]  # one epoch each
    assert curve["difference"]["difference"] == pytest.approx(
        curve["points"][1]["table"]["avg"] - curve["points"][0]["table"]["avg"]
    )
    text = (out / "learning_curve.md").read_text()
    assert "## T8-5: Baseline, subsampling utterances per speaker" in text
    assert "| 50 % | 7 | " in text and "| 100 % | 7 | " in text and curve["verdict"] in text
    assert curve["verdict"].startswith("T8-5 Baseline (utterances per speaker): ")
    assert (out / "learning_curve_T8-5.png").stat().st_size > 10_000
    # The 1-epoch attacker is marked in Table 2, whose rows and notes leave the curve's points out.
    table2 = (out / "table2_comparison.md").read_text()
    assert "| T8-5 | Baseline † |" in table2 and "† T8-5 Baseline: best epoch is the last" in table2
    assert "@utterances50" not in table2 and "50 % utterances" not in table2
    flags = dict(
        zip(
            _column(out / "grid_results.csv", "configuration"),
            _column(out / "grid_results.csv", "convergence_flags"),
        )
    )
    assert "best_epoch_last" in flags["baseline"] and "best_epoch_last" in flags["baseline@utterances50"]
    grid = load_grid(
        REPO / "hparams" / "grid.yaml",
        {
            "output_folder": str(out),
            "data_folder": "x",
            "systems": ["T8-5"],
            "comparison": {"baseline": "baseline", "compared": []},
        },
    )
    lines = verdict_lines(grid)
    assert [line for line in lines if "'s attacker: " in line] == [
        "Baseline's attacker: best epoch is the last: its EER may overstate privacy (docs/evaluation.md#convergence-flags)"
    ]
    assert lines[-1] == curve["verdict"]
    assert text in printed  # run_grid.py prints learning_curve.md

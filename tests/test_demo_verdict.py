"""The demo's comparison and verdict, on synthetic score files in the demo's layout (no training)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np

from segreconcat_aug.evaluation.intervals import SUBSET_COLUMNS as SUBSETS
from segreconcat_aug.evaluation.metrics import verification_metrics
from segreconcat_aug.evaluation.system_report import write_system_report
from segreconcat_aug.evaluation.trials import SubsetScores, SystemResults
from segreconcat_aug.grid.plan import grid_runs, load_grid
from segreconcat_aug.grid.results import assemble, verdict_lines

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "recipes"))  # run_demo imports run_grid from there, as when run as a script


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_demo = _load("run_demo")


def _write_runs(
    out: Path,
    speakers: int,
    utterances: int,
    separations: dict,
    own_noise=0.0,
    enrolled=None,
    seed: int = 0,
    training_seed=None,
):
    """Evaluation folders of the demo's two runs: every model x every test utterance, per subset.

    Scores: shared per-trial noise + ``separation`` on targets + each run's own noise (``own_noise`` sd).
    ``enrolled``: only the first so many speakers have a model (all are tested); ``training_seed``: the
    runs' ``seed<N>`` folders (a grid with ``seeds``).
    """
    rng = np.random.default_rng(seed)
    enroll_index = np.repeat(np.arange(speakers), speakers * utterances)
    utterance_index = np.tile(np.arange(speakers * utterances), speakers)
    keep = enroll_index < (enrolled or speakers)
    enroll_index, utterance_index = enroll_index[keep], utterance_index[keep]
    targets = enroll_index == utterance_index // utterances
    noise = {name: rng.normal(size=len(targets)) for name in SUBSETS}  # the same trials' base scores
    for config, separation in separations.items():
        subsets, metrics = {}, {}
        for name in SUBSETS:
            enroll = [f"{name[-1]}{k}" for k in enroll_index]
            test_speakers = [f"{name[-1]}{u // utterances}" for u in utterance_index]
            test = [f"{s}-{name[:-2]}{u % utterances}" for s, u in zip(test_speakers, utterance_index)]
            own = own_noise * rng.normal(size=len(targets))
            scores = (noise[name] + separation * targets + own).astype(np.float32)
            subsets[name] = SubsetScores(
                name, Path("trials"), enroll, test, targets, scores, test_speakers=test_speakers
            )
            metrics[name] = verification_metrics(scores[targets], scores[~targets])
        folder = out / "MCADAMS" / config / ("" if training_seed is None else f"seed{training_seed}")
        write_system_report(SystemResults("MCADAMS", subsets, metrics), folder / "eval", det_plot=False)
        (folder / "grid_status.json").write_text('{"train": "done", "eval": "done"}')


def _verdicts(grid) -> list[str]:
    """The verdict lines of the compared runs against the baseline."""
    return [line for line in verdict_lines(grid) if " vs " in line]


def _tpr_lines(grid) -> list[str]:
    return [line for line in verdict_lines(grid) if ": TPR at FPR = 1 %:" in line]


def _demo_grid(out: Path, **extra):
    overrides = {"output_folder": str(out), "tables_only": True, **extra}
    return load_grid(REPO / "hparams" / "demo.yaml", overrides)


def test_small_corpus_difference_is_reported_with_interval_and_not_significant(tmp_path):
    # The demo's size: 5 speakers per list, 4 test utterances each (20 target, 80 non-target trials);
    # two runs of the same attacker (same separation, each with its own noise).
    _write_runs(tmp_path, 5, 4, separations={"baseline": 1.0, "rr_concat": 1.0}, own_noise=0.7)
    grid = _demo_grid(tmp_path)
    assemble(grid)
    (line,) = _verdicts(grid)
    assert line.startswith("SegReConcat vs Baseline: ") and " EER points, 95 % CI [" in line
    assert ": not significant on this small corpus; " in line
    low, high = (float(x) for x in line.split("[")[1].split("]")[0].split(","))
    difference = float(line.split(": ")[1].split(" EER")[0])
    assert low < difference < high and low < 0 < high


def test_one_seed_verdict_says_it_covers_the_test_speakers_of_one_run_per_attacker(tmp_path):
    # 5 speakers per gender, the same in every list (their names carry the gender): 10 speakers.
    _write_runs(tmp_path, 5, 4, separations={"baseline": 1.0, "rr_concat": 1.0}, own_noise=0.7)
    grid = _demo_grid(tmp_path)
    assemble(grid)
    (line,) = _verdicts(grid)
    assert line.endswith(
        "; the interval covers the 10 test speakers of one training run per attacker: "
        "another seed or machine can move it"
    )


def test_several_seeds_verdict_says_seeds_are_resampled_too(tmp_path):
    for training_seed in (1, 2, 3):
        _write_runs(
            tmp_path,
            5,
            4,
            separations={"baseline": 1.0, "rr_concat": 1.0},
            own_noise=0.7,
            seed=training_seed,
            training_seed=training_seed,
        )
    grid = _demo_grid(tmp_path)
    grid["seeds"] = [1, 2, 3]
    assemble(grid)
    (line,) = _verdicts(grid)
    assert " EER points, 95 % CI [" in line
    assert line.endswith(
        "; the interval covers the 10 test speakers and the 3 training seeds per attacker, both resampled"
    )
    assert "another seed" not in line


def test_a_large_real_difference_is_significant(tmp_path):
    _write_runs(tmp_path, speakers=30, utterances=3, separations={"baseline": 0.5, "rr_concat": 2.5})
    grid = _demo_grid(tmp_path)
    assemble(grid)
    (line,) = _verdicts(grid)
    assert "significant at 5 % (SegReConcat's EER is lower)" in line


def test_one_speaker_lists_give_no_interval_but_the_difference(tmp_path):
    # One enrolled speaker tested against three speakers' utterances: its targets come from one speaker.
    _write_runs(tmp_path, 3, 3, separations={"baseline": 0.5, "rr_concat": 2.0}, enrolled=1)
    grid = _demo_grid(tmp_path)
    assemble(grid)
    (line,) = _verdicts(grid)
    assert line.startswith("SegReConcat vs Baseline: ") and "no interval (" in line and "one speaker" in line
    table = (tmp_path / "table2_comparison.md").read_text()
    assert "[CI undefined]" in table and "no interval for MCADAMS baseline avg: " in table


def test_tpr_at_one_percent_fpr_is_printed_for_both_attackers(tmp_path):
    # The demo's lists (80 non-targets each) are too small for it alone: the lists are pooled, and named so.
    _write_runs(tmp_path / "small", 5, 4, separations={"baseline": 1.0, "rr_concat": 2.0})
    grid = _demo_grid(tmp_path / "small")
    assemble(grid)
    baseline, segreconcat = _tpr_lines(grid)
    assert baseline.startswith("Baseline (MCADAMS): TPR at FPR = 1 %: ")
    assert segreconcat.endswith(
        "% on its 4 lists pooled (320 non-targets; each list alone has fewer than 100: results.md)"
    )
    # Larger lists, with the operating point among the grid's columns: the lists' average with its
    # interval, as grid_results.csv has it.
    _write_runs(tmp_path / "large", 30, 3, separations={"baseline": 0.5, "rr_concat": 2.5})
    grid = _demo_grid(tmp_path / "large", privacy_columns=["linkability", "min_cllr", "tpr_at_fpr_1"])
    assemble(grid)
    lines = _tpr_lines(grid)
    assert [line.split(":")[0] for line in lines] == ["Baseline (MCADAMS)", "SegReConcat (MCADAMS)"]
    assert all(line.endswith("] % (the lists' average)") for line in lines)
    with open(tmp_path / "large" / "grid_results.csv") as handle:
        header = handle.readline().strip().split(",")
    assert header[-6:-1] == [
        f"{s}"
        for s in (
            "tpr_at_fpr_1_avg",
            "tpr_at_fpr_1_avg_ci_low",
            "tpr_at_fpr_1_avg_ci_high",
            "diff_tpr_at_fpr_1_avg",
            "diff_tpr_at_fpr_1_avg_p",
        )
    ]


def test_table1_runs_the_paper_rows_against_the_baseline_and_tabulates_them(tmp_path):
    # --table1: the Table-1 rows of hparams/demo.yaml, each a paired comparison with the baseline and a
    # row of table1_ablation.md; AR and SR read the orders shipped with the corpus.
    demo_yaml = REPO / run_demo.DEMO_HPARAMS
    overrides = run_demo.table1_overrides(load_grid(demo_yaml))
    text = "\n".join(a[2:].replace("=", ": ", 1) for a in overrides) + f"\noutput_folder: {tmp_path}"
    grid = load_grid(demo_yaml, text)
    runs = [config for _, config, _ in grid_runs(grid)]
    assert runs == ["baseline", "rr", "rr_concat", "ar", "ar_concat", "sr", "sr_concat"]
    table1 = {grid["configurations"][c]["table1"] for c in runs}
    assert table1 == {
        "No Augmentation",
        "RR",
        "RR + Concatenation",
        "AR",
        "AR + Concatenation",
        "SR",
        "SR + Concatenation",
    }
    for config in runs[1:]:
        mode, strategy = grid["configurations"][config]["overrides"].split()
        assert mode == ("--mode=concat" if config.endswith("_concat") else "--mode=rearranged")
        assert strategy == "--strategy=" + {"rr": "random", "ar": "acoustic", "sr": "semantic"}[config[:2]]
    run_demo.check_corpus(REPO / grid["data_folder"], orders=True)  # the AR and SR orders are shipped


def test_the_demo_takes_the_rescore_option_a_changed_score_file_refusal_advises():
    # grid/results.py's refusal of an edited score file advises --rescore_changed_scores=True: the demo's
    # grid key, not a training override (which train.py would refuse).
    from segreconcat_aug.options import GridOptions, validate_hparams_file

    demo_yaml = REPO / run_demo.DEMO_HPARAMS
    flags, grid_args, training = run_demo.split_arguments(["--rescore_changed_scores=True"])
    assert (flags, grid_args, training) == (set(), ["--rescore_changed_scores=True"], {})
    validate_hparams_file(demo_yaml, {"rescore_changed_scores": True}, GridOptions)
    assert load_grid(demo_yaml)["rescore_changed_scores"] is False
    assert load_grid(demo_yaml, "rescore_changed_scores: True")["rescore_changed_scores"] is True

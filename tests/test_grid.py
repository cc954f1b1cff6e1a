"""The grid runner: cells, skip/resume, failures, table and figure assembly (train/eval stubbed)."""

import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from segreconcat_aug.evaluation.intervals import SUBSET_COLUMNS as SUBSETS
from segreconcat_aug.evaluation.metrics import verification_metrics
from segreconcat_aug.evaluation.references import load_reference_results
from segreconcat_aug.evaluation.score_files import read_score_file
from segreconcat_aug.evaluation.system_report import read_results, write_system_report
from segreconcat_aug.evaluation.trials import SubsetScores, SystemResults
from segreconcat_aug.grid.plan import grid_cells, load_grid
from segreconcat_aug.grid.results import cell_scores
from segreconcat_aug.grid.runner import STATUS_FILE, format_command
from segreconcat_aug.training.run_settings import has_checkpoints, saved_hparams

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("run_grid", REPO / "recipes" / "run_grid.py")
run_grid = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_grid)

# Stands in for train.py / evaluate.py: logs the call; "train" writes an export (or fails when the cell
# folder holds FAIL); "eval" copies a prepared evaluation folder for the configuration.
STUB = """
import shutil, sys
from pathlib import Path
step, system, config, out, calls, templates = sys.argv[1:7]
out = Path(out)
with open(calls, "a") as handle:
    handle.write(f"{step} {system} {config}\\n")
if step == "train":
    if (out / "FAIL").exists():
        sys.exit(3)
    (out / "export").mkdir(parents=True, exist_ok=True)
    (out / "export" / "embedding_model.ckpt").write_bytes(b"model")
else:
    # With --seed=N (a grid with seeds), the template prepared for that seed.
    seed = next((a.split("=", 1)[1] for a in sys.argv[7:] if a.startswith("--seed=")), None)
    source = Path(templates) / (config if seed is None else f"{config}-seed{seed}")
    shutil.copytree(source, out / "eval", dirs_exist_ok=True)
"""
SEPARATION = {"baseline": 0.6, "specaug": 0.5, "rr_concat": 1.2, "rr_concat_specaug": 1.5}
# A real training of one epoch with a tiny ECAPA-TDNN, as extra_overrides.
TINY_TRAINING = {
    "channels": [16, 16, 16, 16, 48],
    "lin_neurons": 16,
    "attention_channels": 8,
    "batch_size": 8,
    "num_workers": 0,
    "sentence_len": 2.0,
    "dev_ratio": 0.1,
    "check_workers": 2,
    "number_of_epochs": 1,
    "device": "cpu",
}


def _prepare_eval_templates(folder: Path, seeds=(None,)):
    """A real evaluation folder (write_system_report) per configuration and seed, better attackers separating more.

    The challenge's design: 10 speakers per list, each enrolled and tested with 4 utterances, every model
    against every utterance (40 target, 360 non-target trials); the same trials for every configuration.
    """
    rng = np.random.default_rng(7)
    speakers = np.repeat(np.arange(10), 40)
    utterances = np.tile(np.arange(40), 10)
    targets = speakers == utterances // 4
    for seed in seeds:
        for config, separation in SEPARATION.items():
            subsets, metrics = {}, {}
            for name in SUBSETS:
                enroll = [f"{name}{k}" for k in speakers]
                test_speakers = [f"{name}{u // 4}" for u in utterances]
                ids = [f"{name}{u // 4}-{u % 4}" for u in utterances]
                scores = (rng.normal(size=400) + separation * targets).astype(np.float32)
                subsets[name] = SubsetScores(
                    name, Path("trials"), enroll, ids, targets, scores, test_speakers=test_speakers
                )
                metrics[name] = verification_metrics(scores[targets], scores[~targets])
            target = folder / (config if seed is None else f"{config}-seed{seed}")
            write_system_report(
                SystemResults("any", subsets, metrics), target, det_plot=False, bootstrap={"resamples": 0}
            )


def stub_grid(tmp_path, stub=STUB) -> dict:
    """Grid overrides whose train and eval commands run ``stub`` (a recipe stand-in) on system B3."""
    _prepare_eval_templates(tmp_path / "templates")
    (tmp_path / "stub.py").write_text(stub)
    base = f"{{python}} {tmp_path / 'stub.py'} {{step}} {{system}} {{configuration}} {{output_folder}}"
    tail = f"{tmp_path / 'calls.txt'} {tmp_path / 'templates'} {{overrides}}"
    return {
        "data_folder": str(tmp_path / "vpac"),
        "output_folder": str(tmp_path / "grid"),
        "systems": ["B3"],
        "train_command": base.replace("{step}", "train") + " " + tail,
        "eval_command": base.replace("{step}", "eval") + " " + tail,
    }


@pytest.fixture
def grid_overrides(tmp_path):
    return {
        **stub_grid(tmp_path),
        "comparison": {"baseline": "baseline", "compared": ["rr_concat", "rr_concat_specaug"]},
        "ablation": {"system": "T8-5", "configurations": ["baseline", "specaug", "rr_concat"]},
    }


def _argv(overrides):
    # JSON is YAML: command templates starting with "{" stay strings, lists and mappings stay flow.
    return [str(REPO / "hparams" / "grid.yaml")] + [
        f"--{key}={json.dumps(value)}" for key, value in overrides.items()
    ]


def _calls(tmp_path):
    path = tmp_path / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_grid_cells_cover_both_tables_without_repeats(grid_overrides):
    grid = load_grid(REPO / "hparams" / "grid.yaml", grid_overrides)
    assert grid_cells(grid) == [
        ("B3", "baseline"),
        ("B3", "rr_concat"),
        ("B3", "rr_concat_specaug"),
        ("T8-5", "baseline"),
        ("T8-5", "specaug"),
        ("T8-5", "rr_concat"),
    ]


def test_the_shipped_grid_covers_the_paper():
    grid = load_grid(REPO / "hparams" / "grid.yaml", {"data_folder": "/nowhere"})
    cells = grid_cells(grid)
    configurations = grid["configurations"]
    improvements = {name: spec for name, spec in configurations.items() if "improves" in spec}
    assert len(grid["systems"]) == 7 and len(grid["ablation"]["configurations"]) == 11 + len(improvements)
    assert set(grid["ablation"]["configurations"]) == set(configurations)
    assert len(cells) == 7 * 3 + 8 + len(improvements)  # Table 2 cells, plus Table 1's other T8-5 ones
    published = {row["attacker"] for row in load_reference_results() if row["table"] == "paper-table1"}
    paper = {spec["table1"] for name, spec in configurations.items() if name not in improvements}
    assert paper == published
    # One row per improvement, each one switch away from the paper's row it is measured against.
    switches = {"--rr_redraw=epoch", "--crossfade=0.005", "--segment_policy=cover", "--sr_context=utterance"}
    assert len(improvements) == len(switches)
    for spec in improvements.values():
        base = configurations[spec["improves"]]
        assert "improves" not in base and spec["table1"] not in published
        # orders_variant only names the file of the orders that setting needs (not a method switch).
        added = set(spec["overrides"].split()) - set(base["overrides"].split())
        added -= {o for o in added if o.startswith("--orders_variant=")}
        assert len(added) == 1 and added <= switches


def test_undefined_configuration_is_refused(grid_overrides):
    grid_overrides["comparison"] = {"baseline": "baseline", "compared": ["nope"]}
    with pytest.raises(ValueError, match=r"\['nope'\] are used but not defined"):
        load_grid(REPO / "hparams" / "grid.yaml", grid_overrides)


def test_grid_runs_resumes_and_assembles_tables(grid_overrides, tmp_path):
    fail_marker = tmp_path / "grid" / "T8-5" / "specaug" / "FAIL"
    fail_marker.parent.mkdir(parents=True)
    fail_marker.touch()

    assert run_grid.main(_argv(grid_overrides)) == 1  # one cell failed; the others ran
    calls = _calls(tmp_path)
    assert calls.count("train T8-5 specaug") == 1 and "eval T8-5 specaug" not in calls
    assert len([c for c in calls if c.startswith("eval")]) == 5

    fail_marker.unlink()
    assert run_grid.main(_argv(grid_overrides)) == 0  # only the failed cell runs again
    assert _calls(tmp_path)[len(calls) :] == ["train T8-5 specaug", "eval T8-5 specaug"]

    # An evaluation lost after training: evaluated again, not retrained.
    (tmp_path / "grid" / "B3" / "rr_concat" / "eval" / "results.json").unlink()
    before = len(_calls(tmp_path))
    assert run_grid.main(_argv(grid_overrides)) == 0
    assert _calls(tmp_path)[before:] == ["eval B3 rr_concat"]

    out = tmp_path / "grid"
    base = read_results(out / "B3" / "baseline" / "eval")["table"]
    ours = read_results(out / "B3" / "rr_concat_specaug" / "eval")["table"]
    table2 = (out / "table2_comparison.md").read_text()
    line = next(row for row in table2.splitlines() if row.startswith("| B3 | SegReConcat+SpecAug |"))
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    avg, low, high = (float(x) for x in cells[8].replace("[", "").replace("]", "").replace(",", "").split())
    assert avg == pytest.approx(ours["avg"], abs=0.005) and low < avg < high
    diff, diff_low, diff_high = (
        float(x) for x in cells[9].replace("[", "").replace("]", "").replace(",", "").split()
    )
    assert diff == pytest.approx(ours["avg"] - base["avg"], abs=0.01)
    # Separation 1.5 vs 0.6 on 40 speakers: a real difference, found by the paired test.
    assert diff_low < diff < diff_high < 0 and float(cells[10]) < 0.05 and cells[11] == "yes"
    assert cells[12] == "25.91"  # the paper's published B3 SegReConcat+SpecAug average, its own column
    plain = next(row for row in table2.splitlines() if row.startswith("| B3 | SegReConcat |"))
    assert plain.rstrip(" |").endswith("| - | -")  # the paper reports no plain SegReConcat row for B3
    baseline_line = next(row for row in table2.splitlines() if row.startswith("| B3 | Baseline |"))
    assert "26.85" in baseline_line and "26.28" in baseline_line  # paper and challenge baselines
    assert "published" in table2.splitlines()[2]

    table1 = (out / "table1_ablation.md").read_text()
    assert "| No Augmentation |" in table1 and "37.39" in table1 and "| SpecAug |" in table1
    assert "CI undefined" not in table1 and "CI undefined" not in table2

    with open(out / "grid_results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    row = next(r for r in rows if (r["system"], r["configuration"]) == ("B3", "rr_concat_specaug"))
    assert float(row["avg_ci_low"]) < float(row["avg"]) < float(row["avg_ci_high"])
    assert row["diff_avg_significant"] == "True"
    for name in ("det_T8-5", "det_B3", "forest_T8-5", "forest_B3"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_seeds_run_each_cell_per_seed_and_report_mean_and_std(grid_overrides, tmp_path):
    _prepare_eval_templates(tmp_path / "templates", seeds=(1, 2, 3))
    grid_overrides.update(seeds=[1, 2, 3], ablation=None, bootstrap_resamples=300)
    grid_overrides["comparison"] = {"baseline": "baseline", "compared": ["rr_concat"]}
    assert run_grid.main(_argv(grid_overrides)) == 0
    calls = _calls(tmp_path)
    assert calls.count("eval B3 baseline") == 3 and calls.count("train B3 rr_concat") == 3
    out = tmp_path / "grid"
    logged = (out / "B3" / "rr_concat" / "seed2" / "grid_train.log").read_text()
    assert "--mode=concat" in logged and "--seed=2" in logged
    per_seed = [
        read_results(out / "B3" / "rr_concat" / f"seed{s}" / "eval")["table"]["avg"] for s in (1, 2, 3)
    ]

    table2 = (out / "table2_comparison.md").read_text()
    assert sum(row.startswith("| B3 | SegReConcat, seed ") for row in table2.splitlines()) == 3
    mean_row = next(row for row in table2.splitlines() if "SegReConcat, mean ± std of 3 seeds" in row)
    avg_cell = mean_row.split("|")[9].strip()
    assert avg_cell.startswith(f"{np.mean(per_seed):.2f} ± {np.std(per_seed, ddof=1):.2f} [")
    saved = json.loads((out / "grid_results.json").read_text())["B3/rr_concat"]
    assert saved["difference"]["avg"]["p_value"] < 0.05 and len(saved["seeds"]) == 3
    # Seed and trial variation combined: at least as wide as the typical single seed's interval.
    combined = saved["intervals"]["avg"]["high"] - saved["intervals"]["avg"]["low"]
    single = np.median(
        [run["intervals"]["avg"]["high"] - run["intervals"]["avg"]["low"] for run in saved["seeds"]]
    )
    assert combined > 0.5 * single

    # Without intervals (bootstrap_resamples: 0): still each seed's row and the mean ± std.
    grid_overrides.update(bootstrap_resamples=0, tables_only=True)
    assert run_grid.main(_argv(grid_overrides)) == 0
    plain = (out / "table2_comparison.md").read_text()
    mean_row = next(row for row in plain.splitlines() if "SegReConcat, mean ± std of 3 seeds" in row)
    assert f"| {np.mean(per_seed):.2f} ± {np.std(per_seed, ddof=1):.2f} |" in mean_row and "[" not in mean_row
    assert "No intervals (bootstrap_resamples: 0)" in plain


def test_bad_seeds_are_refused(grid_overrides):
    for seeds, problem in (
        ([1, 1], "input should list each seed once"),
        ("1", "input should be a valid list"),
        ([1.5], "item 0 input should be a valid integer"),
    ):
        grid_overrides["seeds"] = seeds
        with pytest.raises(ValueError, match=rf"grid.yaml: option seeds: .+: {problem}$"):
            load_grid(REPO / "hparams" / "grid.yaml", grid_overrides)
    grid_overrides["seeds"] = None
    grid_overrides["configurations"] = {"baseline": {"seeds": [3, 3]}, "segreconcat": None}
    with pytest.raises(
        ValueError, match=r"option configurations.baseline.seeds: \[3, 3\]: input should list"
    ):
        load_grid(REPO / "hparams" / "grid.yaml", grid_overrides)


def test_tables_only_runs_nothing(grid_overrides, tmp_path):
    grid_overrides["tables_only"] = True
    assert run_grid.main(_argv(grid_overrides)) == 0
    assert _calls(tmp_path) == []
    assert "| B3 | Baseline | - |" in (tmp_path / "grid" / "table2_comparison.md").read_text()


def test_format_command_quotes_fields_but_splits_overrides():
    command = format_command(
        "{python} t.py --output_folder={output_folder} {overrides}",
        {"python": sys.executable, "output_folder": "/a b/c", "overrides": "--mode=none --specaug=True"},
    )
    assert command == [sys.executable, "t.py", "--output_folder=/a b/c", "--mode=none", "--specaug=True"]


def test_one_real_tiny_cell(vpac_root, tmp_path, monkeypatch, capsys):
    """recipes/train.py (one epoch, tiny ECAPA) then recipes/evaluate.py, through the grid runner."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tiny = dict(TINY_TRAINING)
    overrides = {
        "data_folder": str(vpac_root),
        "output_folder": str(tmp_path / "grid"),
        "systems": ["T8-5"],
        "comparison": {"baseline": "baseline", "compared": []},
        "ablation": None,
        "extra_overrides": tiny,
    }
    assert run_grid.main(_argv(overrides)) == 0
    # The training's epoch line reaches the console (the rest of its output goes to grid_train.log).
    console = capsys.readouterr().out
    assert "T8-5/baseline train: epoch 1/1: train loss " in console
    assert "dev loss " in console and "samples/s" in console
    cell = tmp_path / "grid" / "T8-5" / "baseline"
    assert (cell / "export" / "embedding_model.ckpt").is_file()
    results = read_results(cell / "eval")
    assert list(results["subsets"]) == list(SUBSETS)
    assert all(0.0 <= results["table"][column] <= 100.0 for column in results["table"])
    line = next(
        r for r in (tmp_path / "grid" / "table2_comparison.md").read_text().splitlines() if "| T8-5 |" in r
    )
    assert f"| {results['table']['avg']:.2f} [" in line and "37.39" in line  # our EER [interval], published
    assert results["bootstrap"]["test_speakers"] == "utt2spk"  # evaluate.py wrote the test speakers
    log = (cell / "grid_train.log").read_text()
    assert run_grid.main(_argv(overrides)) == 0  # finished: nothing runs again
    assert (cell / "grid_train.log").read_text() == log


def test_a_cell_failed_on_an_option_is_retried_once_the_option_is_corrected(vpac_root, tmp_path, monkeypatch):
    """Issue 22: the grid makes the cell's folder before training; a training refused on its options
    (60 s crops: no training rows) must not make that folder refuse the corrected rerun."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    _prepare_eval_templates(tmp_path / "templates")
    (tmp_path / "stub.py").write_text(STUB)
    tiny = dict(TINY_TRAINING)
    stub = f"{{python}} {tmp_path / 'stub.py'} eval {{system}} {{configuration}} {{output_folder}}"
    overrides = {
        "data_folder": str(vpac_root),
        "output_folder": str(tmp_path / "grid"),
        "systems": ["T8-5"],
        "comparison": {"baseline": "baseline", "compared": []},
        "ablation": None,
        "bootstrap_resamples": 0,
        "eval_command": f"{stub} {tmp_path / 'calls.txt'} {tmp_path / 'templates'}",  # real training, stub scoring
        "extra_overrides": {**tiny, "sentence_len": 60.0},
    }
    cell = tmp_path / "grid" / "T8-5" / "baseline"
    assert run_grid.main(_argv(overrides)) == 1
    assert "no training rows" in (cell / "grid_train.log").read_text()
    assert not has_checkpoints(cell / "save")  # nothing trained: no settings to hold a rerun to

    overrides["extra_overrides"] = tiny
    assert run_grid.main(_argv(overrides)) == 0
    assert (cell / "export" / "embedding_model.ckpt").is_file()
    assert saved_hparams(cell)["sentence_len"] == 2.0
    assert json.loads((cell / STATUS_FILE).read_text()) == {"train": "done", "eval": "done"}


def test_parallel_runs_overlap_and_give_the_same_tables(grid_overrides, tmp_path):
    # Each training stub waits until another has started (at most 20 s): with parallel: 2 two run at
    # once; the tables are those of the one-at-a-time grid.
    waiting = (
        "import time, os\n"
        "flag = os.path.join(os.path.dirname(calls), 'started-' + config + '-' + system)\n"
        "open(flag, 'w').close()\n"
        "others = lambda: [f for f in os.listdir(os.path.dirname(calls)) if f.startswith('started-')]\n"
        "deadline = time.time() + 20\n"
        "while step == 'train' and len(others()) < 2 and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        "with open(calls + '.overlap', 'a') as h:\n"
        "    h.write(f'{step} {config} {len(others()) >= 2}\\n')\n"
    )
    (tmp_path / "stub.py").write_text(STUB.replace('if step == "train":', waiting + 'if step == "train":', 1))
    grid_overrides.update(parallel=2, ablation=None, bootstrap_resamples=200)
    assert run_grid.main(_argv(grid_overrides)) == 0
    overlap = (tmp_path / "calls.txt.overlap").read_text().splitlines()
    assert (
        "train baseline True" in overlap and len([line for line in overlap if line.startswith("eval")]) == 3
    )
    parallel_table = (tmp_path / "grid" / "table2_comparison.md").read_text()
    serial = {**grid_overrides, "parallel": 1, "output_folder": str(tmp_path / "serial")}
    assert run_grid.main(_argv(serial)) == 0
    assert (tmp_path / "serial" / "table2_comparison.md").read_text() == parallel_table
    with pytest.raises(ValueError, match="option parallel: 0: input should be greater than or equal to 1"):
        load_grid(REPO / "hparams" / "grid.yaml", {**grid_overrides, "parallel": 0})


def test_environment_reaches_each_run_and_the_users_own_values_win(grid_overrides, tmp_path, monkeypatch):
    # The stub records two variables: one only the grid sets, one the user's shell sets too.
    record = (
        "import os\n"
        "with open(calls + '.env', 'a') as h:\n"
        "    h.write(f\"{step} {os.environ.get('SRC_GRID_ONLY')} {os.environ.get('SRC_BOTH')}\\n\")\n"
    )
    (tmp_path / "stub.py").write_text(STUB.replace('if step == "train":', record + 'if step == "train":', 1))
    monkeypatch.setenv("SRC_BOTH", "from-user")
    monkeypatch.delenv("SRC_GRID_ONLY", raising=False)
    grid_overrides.update(
        ablation=None, bootstrap_resamples=0, environment={"SRC_GRID_ONLY": 1, "SRC_BOTH": "from-grid"}
    )
    assert run_grid.main(_argv(grid_overrides)) == 0
    seen = (tmp_path / "calls.txt.env").read_text().splitlines()
    assert len(seen) == 6 and set(seen) == {"train 1 from-user", "eval 1 from-user"}
    # The logged command carries the values the processes got, so it reruns as it ran.
    logged = (tmp_path / "grid" / "B3" / "baseline" / "grid_train.log").read_text().splitlines()[0]
    assert logged.startswith("$ SRC_GRID_ONLY=1 SRC_BOTH=from-user ")
    import os

    assert "SRC_GRID_ONLY" not in os.environ  # set for the runs, not in the grid's own process


@pytest.mark.parametrize(
    "environment, message",
    [
        (
            {"OMP_NUM_THREADS": True},
            "environment.OMP_NUM_THREADS: True: input should be a string or a number",
        ),
        (
            {"OMP_NUM_THREADS": [1]},
            r"environment.OMP_NUM_THREADS: \[1\]: input should be a string or a number",
        ),
        ({"1BAD": 1}, "environment: '1BAD': '1BAD' is not a variable name"),
        (["OMP_NUM_THREADS=1"], "environment: .+: input should be a valid dictionary"),
    ],
)
def test_bad_environment_is_refused_before_anything_runs(
    grid_overrides, tmp_path, capsys, environment, message
):
    grid_overrides["environment"] = environment
    with pytest.raises(ValueError, match=message):
        load_grid(REPO / "hparams" / "grid.yaml", grid_overrides)
    with pytest.raises(SystemExit) as stopped:
        run_grid.run_main(run_grid.main, _argv(grid_overrides))
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "grid.yaml: option environment" in error[0]
    assert _calls(tmp_path) == [] and not (tmp_path / "grid").exists()


def test_the_demo_environment_is_one_thread_and_glibc_keeping_freed_memory():
    grid = load_grid(REPO / "hparams" / "demo.yaml")
    assert grid["environment"]["OMP_NUM_THREADS"] == 1
    assert {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"} <= set(grid["environment"])


def test_tables_only_refuses_a_finished_cells_score_file_changed_damaged_or_lost(
    grid_overrides, tmp_path, capsys
):
    """Issue 32, probes 4 and 6: the tables never mix results.json's points with another file's intervals,
    and a damaged score file is one line naming it, with the fix."""
    grid_overrides.update(ablation=None, bootstrap_resamples=50)
    grid_overrides["comparison"] = {"baseline": "baseline", "compared": ["rr_concat"]}
    assert run_grid.main(_argv(grid_overrides)) == 0
    eval_folder = tmp_path / "grid" / "B3" / "rr_concat" / "eval"
    scores = eval_folder / "scores" / "dev_f.txt"
    original = scores.read_text()
    tables_only = _argv({**grid_overrides, "tables_only": True})

    def refused(fragments):
        capsys.readouterr()  # what the runs before printed
        with pytest.raises(SystemExit) as stopped:
            run_grid.run_main(run_grid.main, tables_only)
        error = capsys.readouterr().err.strip().splitlines()
        assert stopped.value.code == 2 and len(error) == 1, error
        assert all(fragment in error[0] for fragment in fragments), error[0]

    edited = [  # every target trial's score lowered by 1: the EER must rise
        " ".join([*f[:3], f"{float(f[3]) - (f[2] == 'target'):.9g}", *f[4:]])
        for f in (line.split() for line in original.splitlines())
    ]
    scores.write_text("\n".join(edited) + "\n")
    refused([f"{scores}: changed since {eval_folder / 'results.json'}", "--rescore_changed_scores=True"])
    before = read_results(eval_folder)
    assert run_grid.main(_argv({**grid_overrides, "tables_only": True, "rescore_changed_scores": True})) == 0
    after = read_results(eval_folder)
    rescored = read_score_file(scores)
    expected = verification_metrics(rescored.scores[rescored.targets], rescored.scores[~rescored.targets])
    assert (
        after["score_digests"] != before["score_digests"]
        and after["table"]["dev_f"] > before["table"]["dev_f"]
    )
    assert after["table"]["dev_f"] == pytest.approx(expected["eer"])
    assert cell_scores(eval_folder, after)[1] is False  # rescored: its numbers are its score files' again

    fix = f"delete {eval_folder} and rerun the grid"
    scores.write_text(original.replace(original.split()[3], "nan", 1))
    refused([f"{scores}:1: score 'nan' is not a finite number", fix])
    scores.write_text("a b target\n")
    refused([f"{scores}:1: expected '<enroll> <test> target|nontarget <score>", fix])
    scores.unlink()
    refused([f"{scores}: missing, but {eval_folder / 'results.json'} lists it", fix])


def test_a_configuration_can_skip_training_evaluate_anothers_model_and_be_paired_with_its_own_row(
    grid_overrides, tmp_path
):
    """hparams/attackers.yaml's machinery: ``train_command: ""`` (a given model), ``model_of`` (another
    configuration's model, evaluated after it trained) and ``versus`` (a second pairing, table_pairs.md)."""
    grid_overrides["configurations"] = {
        "baseline": {"label": "Given model", "train_command": "", "overrides": "--eval_model_folder=/given"},
        "rr_concat": {"label": "Trained", "versus": "baseline", "overrides": "--mode=concat"},
        "specaug": {"label": "Trained, scored otherwise", "model_of": "rr_concat", "overrides": "--x=1"},
    }
    grid_overrides["comparison"] = {"baseline": "rr_concat", "compared": ["specaug", "baseline"]}
    grid_overrides["ablation"] = {"system": "B3", "configurations": []}
    grid_overrides["parallel"] = 2
    assert run_grid.main(_argv(grid_overrides)) == 0
    calls = _calls(tmp_path)
    assert sorted(c for c in calls if c.startswith("train")) == ["train B3 rr_concat"]
    assert calls.index("eval B3 specaug") > calls.index("train B3 rr_concat")  # its model existed first
    out = tmp_path / "grid" / "B3"
    log = (out / "specaug" / "grid_eval.log").read_text()
    assert f"--eval_model_folder={(out / 'rr_concat' / 'export').as_posix()}" in log and "--x" in log
    pairs = (tmp_path / "grid" / "table_pairs.md").read_text()
    row = next(line for line in pairs.splitlines() if line.startswith("| B3 | Trained | Given model |"))
    # Separation 1.2 vs 0.6 on 40 speakers: the trained row's EER is lower, and the paired test finds it.
    assert row.split("|")[4].strip().startswith("-") and row.split("|")[6].strip() == "yes"
    grid_overrides["configurations"]["specaug"]["model_of"] = "nope"
    with pytest.raises(ValueError, match="model_of must name a configuration"):
        load_grid(REPO / "hparams" / "grid.yaml", grid_overrides)


def test_the_attacker_grid_pairs_every_row_with_the_papers_attacker_and_each_concat_row_with_its_own():
    given = {"data_folder": "/nowhere", "init_from": "/model"}
    without_dast = load_grid(REPO / "hparams" / "attackers.yaml", given)
    assert not any(
        config.startswith("dast") for _, config in grid_cells(without_dast)
    )  # no DAST folder needed
    dast = {"dast_folder": "/dast", "dast_rows": ["dast_ft", "dast_ft_concat"]}
    grid = load_grid(REPO / "hparams" / "attackers.yaml", {**given, **dast})
    configs = grid["configurations"]
    assert grid["comparison"]["baseline"] == "scratch_concat"
    assert set(grid["comparison"]["compared"]) | {"scratch_concat"} == set(configs)
    for row in dast["dast_rows"]:
        assert configs[row]["train_hparams"] == "hparams/ecapa_ssl_segreconcat.yaml"
        assert {"--init_from=/dast", "--preset=dast-stage3", "--ssl_input=same_window"} <= set(
            configs[row]["overrides"].split()
        )
    assert configs["dast_ft_concat"]["versus"] == "dast_ft"
    for spec in configs.values():
        if "--mode=concat" in spec["overrides"]:  # each SegReConcat row against the same attacker without it
            twin = configs[spec["versus"]]
            assert set(spec["overrides"].split()) - set(twin["overrides"].split()) == {
                "--mode=concat",
                "--strategy=random",
            }
    assert (
        configs["pretrained"]["train_command"] == ""
        and "--eval_model_folder=/model" in configs["pretrained"]["overrides"]
    )
    assert configs["pooled_concat"]["train_command"] == configs["pooled_none"]["train_command"]
    assert "--train_systems=[{system},{pool_with}]" in configs["pooled_concat"]["train_command"]
    assert set(grid["pool_with"]) == set(grid["systems"]) and grid["pool_with"]["T10-2"] == "B4"
    assert all(system != other for system, other in grid["pool_with"].items())


def test_a_configurations_own_extra_overrides_go_over_the_grids(grid_overrides, tmp_path):
    """The demo's fine-tuned rows set their lr over the grid-wide lr of extra_overrides."""
    grid_overrides["train_command"] += " {extra}"
    grid_overrides.update(
        ablation=None,
        bootstrap_resamples=0,
        extra_overrides={"lr": 0.005, "seed": 3},
        configurations={"rr_concat": {"extra_overrides": {"lr": 0.001}}},
    )
    assert run_grid.main(_argv(grid_overrides)) == 0
    logged = {
        config: (tmp_path / "grid" / "B3" / config / "grid_train.log").read_text().splitlines()[0]
        for config in ("baseline", "rr_concat")
    }
    assert logged["baseline"].endswith("--lr=0.005 --seed=3")
    assert logged["rr_concat"].endswith("--lr=0.001 --seed=3")

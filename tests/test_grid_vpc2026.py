"""The grid under the VPC 2026 protocols: one attacker per Track 2 language, the languages' table (train/eval stubbed)."""

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from segreconcat_aug.evaluation.metrics import verification_metrics
from segreconcat_aug.evaluation.system_report import read_results, write_system_report
from segreconcat_aug.evaluation.trials import SubsetScores, SystemResults
from segreconcat_aug.grid.plan import grid_cells, load_grid

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "hparams" / "grid.yaml"
spec = importlib.util.spec_from_file_location("run_grid_2026", REPO / "recipes" / "run_grid.py")
run_grid = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_grid)

# Stands in for train.py / evaluate.py: logs its call; "eval" copies the prepared evaluation of its
# configuration and language (--language=<code>).
STUB = """
import shutil, sys
from pathlib import Path
step, system, config, out, calls, templates, protocol = sys.argv[1:8]
language = next(a.split("=", 1)[1] for a in sys.argv[8:] if a.startswith("--language="))
with open(calls, "a") as handle:
    handle.write(f"{step} {system} {language} {config} {protocol}\\n")
if step == "eval":
    shutil.copytree(Path(templates) / f"{config}-{language}", Path(out) / "eval", dirs_exist_ok=True)
"""
SEPARATION = {
    ("baseline", "de"): 0.5,
    ("rr_concat", "de"): 1.5,
    ("baseline", "fr"): 0.8,
    ("rr_concat", "fr"): 1.2,
}


def _templates(folder: Path, languages):
    rng = np.random.default_rng(5)
    speakers = np.repeat(np.arange(8), 16)
    utterances = np.tile(np.arange(16), 8)
    targets = speakers == utterances // 2
    for config in ("baseline", "rr_concat"):
        for language in languages:
            subsets, metrics = {}, {}
            for name in ("dev_mixed", "test_mixed"):
                scores = (
                    rng.normal(size=len(targets)) + SEPARATION.get((config, language), 1.0) * targets
                ).astype(np.float32)
                subsets[name] = SubsetScores(
                    name,
                    Path("trials"),
                    [f"s{k}" for k in speakers],
                    [f"s{u // 2}_{u}" for u in utterances],
                    targets,
                    scores,
                    test_speakers=[f"s{u // 2}" for u in utterances],
                )
                metrics[name] = verification_metrics(scores[targets], scores[~targets])
            results = SystemResults("BM1", subsets, metrics, protocol="vpc2026-track2", language=language)
            write_system_report(
                results, folder / f"{config}-{language}", det_plot=False, bootstrap={"resamples": 0}
            )


def test_track2_grid_runs_one_attacker_per_language_and_puts_the_languages_side_by_side(tmp_path):
    languages = ["de", "fr", "cn"]
    _templates(tmp_path / "templates", languages)
    (tmp_path / "stub.py").write_text(STUB)
    base = f"{{python}} {tmp_path / 'stub.py'} {{step}} {{system}} {{configuration}} {{output_folder}}"
    # (no literal "--" in a template given on the command line: SpeechBrain's parser would split it there)
    tail = f"{tmp_path / 'calls.txt'} {tmp_path / 'templates'} {{protocol}} {{language}} {{overrides}}"
    overrides = {
        "protocol": "vpc2026-track2",
        "languages": languages,
        "data_folder": str(tmp_path / "vpc2026"),
        "output_folder": str(tmp_path / "grid"),
        "systems": ["BM1"],
        "train_command": base.replace("{step}", "train") + " " + tail,
        "eval_command": base.replace("{step}", "eval") + " " + tail,
        "comparison": {"baseline": "baseline", "compared": ["rr_concat"]},
        "bootstrap_resamples": 200,
    }
    argv = [str(GRID)] + [f"--{key}={json.dumps(value)}" for key, value in overrides.items()]
    assert run_grid.main(argv) == 0
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert "train BM1 de baseline vpc2026-track2" in calls and len(calls) == 2 * 2 * len(languages)
    out = tmp_path / "grid"
    assert read_results(out / "BM1" / "fr" / "rr_concat" / "eval")["language"] == "fr"

    text = (out / "table_languages.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| BM1 | SegReConcat |")]
    assert [row.split("|")[3].strip() for row in rows] == ["de", "fr", "average (de, fr)", "cn"]
    de, fr = (read_results(out / "BM1" / lang / "rr_concat" / "eval")["table"] for lang in ("de", "fr"))
    average = rows[2].split("|")[4:7]
    assert [float(cell) for cell in average] == [
        round(np.mean([de[c], fr[c]]), 2) for c in ("dev_mixed", "test_mixed", "avg")
    ]
    assert "[" in rows[0].split("|")[4]  # each language with its own attacker's interval
    table2 = (out / "table2_comparison.md").read_text()
    assert (
        "| system | attacker | dev mixed | test mixed | avg |" in table2
        and "| BM1/de | SegReConcat |" in table2
    )
    with open(out / "grid_results.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert header[3:6] == ["dev_mixed", "test_mixed", "avg"]


def test_2026_grids_skip_the_vpac_ablation_system_they_do_not_have():
    grid = load_grid(GRID, {"data_folder": "/nowhere", "protocol": "vpc2026-track1", "systems": ["B3"]})
    assert {system for system, _ in grid_cells(grid)} == {"B3"}  # no T8-5 Table 1 cells
    vpac = load_grid(GRID, {"data_folder": "/nowhere", "systems": ["B3"]})
    assert "T8-5" in {system for system, _ in grid_cells(vpac)}


def test_a_track2_grid_missing_languages_is_refused_before_any_cell_trains(tmp_path, capsys):
    """Issue 32, probe 5: only the de lists exist; the grid names en, fr and es in one line (exit 2) before
    de trains, instead of failing each of them after de's training."""
    from vpc2026_fixture import build_track2_layout

    root = build_track2_layout(tmp_path / "vpc2026", "BM1", "de")
    argv = [str(GRID), f"--data_folder={root}", f"--output_folder={tmp_path / 'grid'}", "--protocol=vpc2026-track2",
            "--systems=[BM1]", '--comparison={"baseline": "baseline", "compared": []}']  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        run_grid.run_main(run_grid.main, argv)
    # (in the whole suite, a log handler an earlier test left may add its own complaints to stderr)
    error = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert stopped.value.code == 2 and len(error) == 1, error
    assert f": error: {root}: 3 of 4 unit(s) of this grid have no data, so no cell was run" in error[0]
    assert (
        all(f"BM1/{language}: " in error[0] for language in ("en", "fr", "es")) and "BM1/de:" not in error[0]
    )
    assert not (tmp_path / "grid").exists()  # nothing ran, nothing was written

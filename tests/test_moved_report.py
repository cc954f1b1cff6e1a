"""0.1.0's ``segreconcat_aug.report`` was split into modules of one concern each; its names still import."""

import importlib
import importlib.util
import subprocess
import sys

from segreconcat_aug.evaluation import (
    comparison,
    figures,
    intervals,
    references,
    score_files,
    system_report,
    tables,
)


def test_every_name_of_the_old_report_module_comes_from_its_new_module():
    from segreconcat_aug.report import (
        BOOTSTRAP_DEFAULTS,
        REFERENCE_FILE,
        ScoreFile,
        compare_runs,
        comparison_table,
        plot_forest,
        system_intervals,
        write_system_report,
    )

    assert ScoreFile is score_files.ScoreFile
    assert (
        system_intervals is intervals.system_intervals and BOOTSTRAP_DEFAULTS is intervals.BOOTSTRAP_DEFAULTS
    )
    assert write_system_report is system_report.write_system_report
    assert plot_forest is figures.plot_forest
    assert REFERENCE_FILE is references.REFERENCE_FILE and REFERENCE_FILE.is_file()
    assert compare_runs is comparison.compare_runs
    assert comparison_table is tables.comparison_table


def test_the_old_module_lists_the_new_modules_names_and_refuses_unknown_ones():
    report = importlib.import_module("segreconcat_aug.report")
    assert {"read_score_file", "privacy_table", "markdown_table", "plot_det", "reference_value"} <= set(
        report.__all__
    )
    try:
        report.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("an unknown name imported")


def test_the_grab_bag_is_gone():
    assert importlib.util.find_spec("segreconcat_aug.evaluation.report") is None


def test_a_fresh_interpreter_imports_the_old_path_first():
    """Nothing else loaded before: the split modules import without a cycle through the old path."""
    code = (
        "from segreconcat_aug.report import language_table, seed_mean_std; print(language_table.__module__)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "segreconcat_aug.evaluation.tables"

"""Every module path of 0.1.0 still imports (segreconcat_aug._moved), as the same module or a forwarder."""

import importlib
import subprocess
import sys

import pytest

from segreconcat_aug._moved import MOVED

OLD = sorted(MOVED)


@pytest.mark.parametrize("old", OLD)
def test_an_old_module_path_gives_the_new_module(old):
    module = importlib.import_module(f"segreconcat_aug.{old}")
    targets = [importlib.import_module(f"segreconcat_aug.{new}") for new in MOVED[old]]
    if len(targets) == 1:
        assert module is targets[0]  # the same object: patching either name patches both
    else:
        names = [n for t in targets for n in getattr(t, "__all__", vars(t)) if not n.startswith("_")]
        assert names and all(
            getattr(module, n) is getattr(next(t for t in targets if hasattr(t, n)), n) for n in names
        )


def test_old_submodule_paths_and_the_old_evaluation_module_import_in_a_fresh_interpreter():
    code = (
        "from segreconcat_aug.aligners.pocketsphinx import PocketsphinxAligner\n"
        "from segreconcat_aug.align.aligners import pocketsphinx\n"
        "assert PocketsphinxAligner is pocketsphinx.PocketsphinxAligner\n"
        "from segreconcat_aug.evaluation import evaluate_system, SubsetScores\n"
        "from segreconcat_aug.augment import SegReConcat\n"
        "import segreconcat_aug\n"
        "assert SegReConcat is segreconcat_aug.SegReConcat\n"
        "import sys; assert sys.modules['segreconcat_aug.augment'] is sys.modules['segreconcat_aug.method.augment']\n"
        "from segreconcat_aug.evaluation.model_folder import load_speaker_model\n"
        "from segreconcat_aug.training.export import export_best_model\n"
        "from segreconcat_aug.models import export, folder\n"
        "assert (load_speaker_model, export_best_model) == (folder.load_speaker_model, export.export_best_model)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_a_name_no_module_of_a_split_path_has_is_an_attribute_error():
    forwarder = importlib.import_module("segreconcat_aug.mcadams")
    with pytest.raises(AttributeError, match="segreconcat_aug.mcadams.*no_such_name"):
        forwarder.no_such_name  # noqa: B018


#: The public names of segreconcat_aug/evaluation/privacy.py before it became a package (one module per
#: metric family): each still imports from the package, and from the 0.1.0 path segreconcat_aug.privacy.
PRIVACY_NAMES = (
    "MONOTONICITY_EPSILON ZEBRA_TAGS ZEBRA_ZERO LINKABILITY_MIN_TARGETS PrivacyOptions population_sizes "
    "Linkability linkability_bins linkability zebra_tag Zebra CalibrationMetrics min_cllr rocch_eer zebra "
    "cllr ListStructure list_structure Identification pi_link_sweep SinglingOut SpeakerRisk INTERVAL_METRICS "
    "topk_key interval_names ListPrivacy"
).split()


def test_every_name_of_the_single_privacy_module_imports_from_the_package_and_the_old_path():
    package = importlib.import_module("segreconcat_aug.evaluation.privacy")
    old = importlib.import_module("segreconcat_aug.privacy")
    assert old is package and set(PRIVACY_NAMES) <= set(package.__all__)
    assert all(hasattr(package, name) for name in PRIVACY_NAMES)
    assert all(callable(getattr(package, name)) for name in ("linkability", "zebra", "cllr"))
    from segreconcat_aug.privacy import ListPrivacy as old_list

    from segreconcat_aug.evaluation.privacy.list_privacy import ListPrivacy

    assert old_list is ListPrivacy

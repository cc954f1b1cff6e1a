"""Shared pytest fixtures (real LibriSpeech audio, a tiny VPAC layout) and the checkout guard.

The guard: tests write only to temporary folders. The checkout's paths are listed when this file
is loaded and again when the session ends; any new one fails the session (exit status 1) and is
named. Python's bytecode caches are switched off for the session, and numba's compilation cache
(``cache=True`` writes next to the source, in ``segreconcat_aug/__pycache__``) goes to the system's
temporary folder: here and, through the environment, in the recipes the tests start. So the
comparison needs no exceptions.
"""

import os
import sys
import tempfile

sys.dont_write_bytecode = True
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
os.environ["NUMBA_CACHE_DIR"] = os.path.join(
    tempfile.gettempdir(), "segreconcat-aug-numba"
)  # before numba loads
# ``make test`` runs one pytest-xdist worker per core: each worker, and the recipes it starts, on one
# thread (set before torch loads), so that the workers do not compete for the same cores.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import speechbrain  # noqa: E402, F401  (registers its lazy modules, purged below)
from checkout_guard import checkout_paths, default_skip  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from speechbrain.utils.importutils import LazyModule  # noqa: E402
from vpac_fixture import FIXTURES, build_vpac_layout  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[1]
CHECKOUT_BEFORE = checkout_paths(CHECKOUT, default_skip(CHECKOUT))

# Hypothesis keeps its example database and caches in ./.hypothesis by default: in the checkout.
# Here they go to the system's temporary folder. CI runs the same examples every time (a failure
# there is reproducible); local runs explore.
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "segreconcat-aug-hypothesis"))
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# SpeechBrain registers lazy placeholder modules (k2, spacy, flair...) that raise
# ImportError on attribute access; hypothesis' pytest plugin scans sys.modules at
# collection and trips over them. They are optional integrations we never use.
for _name, _module in list(sys.modules.items()):
    if isinstance(_module, LazyModule):
        del sys.modules[_name]


@pytest.fixture(scope="session")
def librispeech_dir():
    """The committed LibriSpeech fixture folder (flac files, ``text``, ``spk2gender``)."""
    return FIXTURES


@pytest.fixture(scope="session")
def vpac_root(tmp_path_factory):
    """A two-system VPAC layout (B3, T8-5) with synthetic alignments; do not modify it."""
    return build_vpac_layout(tmp_path_factory.mktemp("vpac"))


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory):
    """``run_demo.py --quick`` run once (its output folder and the finished process); do not modify it.

    It trains on a quarter of the training speakers (``--train_fraction=0.25 --train_subsample=speakers``;
    the demo has about one utterance per speaker, so a share of each speaker's would keep nearly all): the
    evaluation is the demo's, and no assertion depends on how well the one-epoch model learns. The
    attacker demo's test starts from a copy of its two from-scratch runs, which ``--attackers --quick``
    would otherwise train again with the same commands."""
    import subprocess

    folder = tmp_path_factory.mktemp("quick-demo")
    run = subprocess.run(
        [
            sys.executable,
            str(CHECKOUT / "recipes" / "run_demo.py"),
            "--quick",
            f"--output_folder={folder / 'demo'}",
            "--train_fraction=0.25",
            "--train_subsample=speakers",
        ],
        capture_output=True,
        text=True,
        cwd=folder,  # run_demo.py must not depend on the working directory
        timeout=900,
    )
    return folder / "demo", run


@pytest.fixture(autouse=True)
def _release_folder_locks():
    """A recipe's main() run in this process holds its output folder until the process ends (as a run
    does); a test's end is where such a run ends, so a later test's subprocess can write the folder."""
    yield
    from segreconcat_aug.data.folder_lock import release_held

    release_held()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """``--dist loadgroup``: the xdist_group suffix on each marked test's id. pytest-xdist's own hook writes
    it to ``item._nodeid``, which pytest 9 does not read: without this, a group's tests spread over the
    workers and each worker builds the group's fixtures."""
    if not XDIST_WORKER or not config.getvalue("loadgroup"):
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted(
            {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")) for mark in marks}
        )
        if names and "@" not in item.nodeid.rpartition("]")[2]:  # an older pytest has xdist's suffix
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if it left a new file or folder in the checkout (ignored ones included)."""
    if XDIST_WORKER:
        # The controlling process compares once all workers are done; a worker finishing early would
        # see another one's test at work, and its exit status is not the run's.
        return
    new = sorted(checkout_paths(CHECKOUT, default_skip(CHECKOUT)) - CHECKOUT_BEFORE)
    if not new:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [
        f"the tests left {len(new)} new path(s) in the checkout {CHECKOUT} (tests write to tmp_path only):"
    ]
    lines += [f"  {path}" for path in new[:50]]
    if reporter is not None:
        reporter.write_sep("=", "checkout guard", red=True)
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

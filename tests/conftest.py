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


@pytest.fixture(autouse=True)
def _release_folder_locks():
    """A recipe's main() run in this process holds its output folder until the process ends (as a run
    does); a test's end is where such a run ends, so a later test's subprocess can write the folder."""
    yield
    from segreconcat_aug.data.folder_lock import release_held

    release_held()


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if it left a new file or folder in the checkout (ignored ones included)."""
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

"""Shared pytest fixtures: real LibriSpeech audio and a tiny VPAC layout."""

import os
import sys

import pytest
import speechbrain  # noqa: F401  (registers its lazy modules, purged below)
from hypothesis import settings
from speechbrain.utils.importutils import LazyModule
from vpac_fixture import FIXTURES, build_vpac_layout

# CI runs the same examples every time (a failure there is reproducible); local runs explore.
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

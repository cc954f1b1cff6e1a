"""Shared pytest fixtures: real LibriSpeech audio and a tiny VPAC layout."""

import pytest
from vpac_fixture import FIXTURES, build_vpac_layout


@pytest.fixture(scope="session")
def librispeech_dir():
    """The committed LibriSpeech fixture folder (flac files, ``text``, ``spk2gender``)."""
    return FIXTURES


@pytest.fixture(scope="session")
def vpac_root(tmp_path_factory):
    """A two-system VPAC layout (B3, T8-5) with synthetic alignments; do not modify it."""
    return build_vpac_layout(tmp_path_factory.mktemp("vpac"))

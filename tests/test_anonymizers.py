"""The anonymizer interface: another anonymizer plugs into folder anonymization and the recipe."""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from segreconcat_aug.anonymizers import Anonymizer, check_anonymizer
from segreconcat_aug.anonymizers.folder import anonymize_folder
from segreconcat_aug.anonymizers.mcadams import McAdamsAnonymizer
from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.data.kaldi import load_kaldi_folder, read_kaldi_map
from segreconcat_aug.seeding import seeded_rng

REPO = Path(__file__).resolve().parents[1]


@dataclass
class ReversedQuieter:
    """A toy anonymizer: the utterance time-reversed at a gain drawn per utterance."""

    seed: int = 0
    sample_rate: int = 16000
    name = "reversed"

    def parameters(self, utt_id):
        return {"gain": float(seeded_rng(self.seed, 0, utt_id).uniform(0.3, 0.6))}

    def __call__(self, audio, utt_id):
        return (audio[::-1] * self.parameters(utt_id)["gain"]).astype(np.float32)


@pytest.fixture
def audio_folder(librispeech_dir, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("19-198-0000", "26-495-0007"):
        (folder / f"{name}.flac").write_bytes((librispeech_dir / f"{name}.flac").read_bytes())
    return folder


def test_another_anonymizer_plugs_into_folder_anonymization(audio_folder, tmp_path):
    anonymizer = ReversedQuieter(seed=4)
    assert isinstance(anonymizer, Anonymizer)
    report = anonymize_folder(audio_folder, tmp_path / "out", anonymizer, progress=False)
    folder = load_kaldi_folder(tmp_path / "out")
    assert report.written == 2 and sorted(folder.wav) == ["19-198-0000", "26-495-0007"]
    gains = {utt: float(value) for utt, value in read_kaldi_map(tmp_path / "out" / "utt2gain").items()}
    assert gains == pytest.approx({utt: anonymizer.parameters(utt)["gain"] for utt in folder.wav}, abs=1e-6)
    assert not (tmp_path / "out" / "utt2alpha").exists() and "alpha" not in report.parameters
    for utt in folder.wav:
        original = read_audio(audio_folder / f"{utt}.flac")
        written = read_audio(folder.wav[utt])
        # What was written is the anonymizer's output (16-bit PCM: within one quantization step).
        assert np.abs(written - original[::-1] * gains[utt]).max() < 2 / 32768


def test_mcadams_records_its_alpha(audio_folder, tmp_path):
    anonymizer = McAdamsAnonymizer(seed=2)
    assert isinstance(anonymizer, Anonymizer)
    report = anonymize_folder(audio_folder, tmp_path / "out", anonymizer, progress=False)
    alphas = read_kaldi_map(tmp_path / "out" / "utt2alpha")
    assert {utt: float(a) for utt, a in alphas.items()} == pytest.approx(report.parameters["alpha"], abs=1e-6)
    assert report.parameters["alpha"] == {utt: anonymizer.alpha(utt) for utt in alphas}


def test_what_is_not_an_anonymizer_is_named():
    class Half:
        sample_rate = 16000

        def __call__(self, audio, utt_id):
            return audio

    with pytest.raises(TypeError, match=r"^Half is not an anonymizer: it lacks parameters\(utt_id\)$"):
        check_anonymizer(Half())


def test_the_recipe_refuses_a_yaml_anonymizer_that_lacks_the_interface(audio_folder, tmp_path):
    yaml = (REPO / "hparams" / "anonymize.yaml").read_text()
    head, _, tail = yaml.partition("anonymizer: !new:segreconcat_aug.anonymizers.mcadams.McAdamsAnonymizer")
    rest = tail.split("\n\n", 1)[1] if "\n\n" in tail else ""
    broken = tmp_path / "anonymize.yaml"
    broken.write_text(head + "anonymizer: !new:collections.OrderedDict\n\n" + rest)
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "recipes" / "anonymize.py"),
            str(broken),
            f"--input_folder={audio_folder}",
            f"--output_folder={out}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{broken}: anonymizer: OrderedDict is not an anonymizer" in lines[0]
    assert not out.exists()

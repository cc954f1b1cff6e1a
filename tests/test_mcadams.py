"""McAdams anonymizer on real LibriSpeech speech, and the folder/recipe that writes the challenge layout."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mcadams_reference import mcadams_frame_loop

from segreconcat_aug.anonymizers.folder import anonymize_folder
from segreconcat_aug.anonymizers.mcadams import McAdamsAnonymizer, mcadams
from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.data.kaldi import load_kaldi_folder, read_kaldi_map

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def speech(librispeech_dir):
    return read_audio(librispeech_dir / "19-198-0001.flac")  # 11.8 s, female


def test_length_preserved_bounded_and_changed(speech):
    out = mcadams(speech, 0.7)
    assert out.shape == speech.shape and out.dtype == np.float32
    assert np.all(np.isfinite(out)) and np.abs(out).max() == pytest.approx(1.0, abs=1e-6)
    reference = speech / np.abs(speech).max()
    # McAdams moves the formants: the waveform is no longer the input's.
    assert abs(np.corrcoef(out, reference)[0, 1]) < 0.5


def test_alpha_one_is_identity_up_to_peak(speech):
    # alpha = 1 keeps every pole: analysis/synthesis must reconstruct the input exactly.
    out = mcadams(speech, 1.0, peak=0.5)
    np.testing.assert_allclose(out, speech / np.abs(speech).max() * 0.5, atol=1e-5)


def test_odd_lengths_and_silence():
    rng = np.random.default_rng(1)
    for length in (1, 159, 321, 16001):
        noise = rng.standard_normal(length)
        assert mcadams(noise, 0.6).shape == (length,)
    silent = mcadams(np.zeros(8000), 0.6)
    assert silent.shape == (8000,) and not silent.any()
    with pytest.raises(ValueError, match="mono"):
        mcadams(np.zeros((2, 100)), 0.6)


def test_matches_the_b2_frame_loop(speech):
    clip = speech[: 3 * 16000]
    ours, loop = mcadams(clip, 0.8), mcadams_frame_loop(clip, 0.8)
    # The loop skips frame 0 and the tail, and uses a symmetric Hann: compare the interior.
    inner = slice(800, len(clip) - 800)
    assert np.corrcoef(ours[inner], loop[inner])[0, 1] > 0.999


def test_raises_the_spectral_centroid_of_speech_for_alpha_below_one(speech):
    # A pole at angle phi moves to phi ** alpha: with alpha < 1, up below 1 rad (2.55 kHz at 16 kHz) and
    # down above it. Speech's formants (its energy) lie mostly below 1 rad, so its centroid rises
    # (measured: 688 Hz -> 3055 Hz at alpha 0.5).
    def centroid(x):
        power = np.abs(np.fft.rfft(x)) ** 2
        freqs = np.fft.rfftfreq(len(x), 1 / 16000)
        return float((power * freqs).sum() / power.sum())

    assert centroid(mcadams(speech, 0.5)) > centroid(speech) + 1000.0


@pytest.mark.parametrize("resonance", [500.0, 5000.0])
def test_a_resonance_moves_to_its_angle_to_the_power_alpha(resonance):
    """One resonance (an AR(2) pole pair in noise) lands where phi ** alpha says: 500 Hz (0.2 rad) up to
    1128 Hz, 5 kHz (1.96 rad) down to 3568 Hz; the spectrum's peak is found within 3 Welch bins (47 Hz)."""
    from scipy.signal import lfilter, welch

    angle = 2 * np.pi * resonance / 16000
    noise = np.random.default_rng(0).standard_normal(3 * 16000)
    signal = lfilter([1.0], [1.0, -2 * 0.98 * np.cos(angle), 0.98**2], noise)
    freqs, power = welch(mcadams(signal, 0.5), 16000, nperseg=1024)
    expected = angle**0.5 * 16000 / (2 * np.pi)
    assert abs(freqs[np.argmax(power)] - expected) <= 3 * 16000 / 1024, (freqs[np.argmax(power)], expected)


def test_alpha_per_utterance_deterministic(speech):
    anonymizer = McAdamsAnonymizer(seed=11)
    ids = [f"19-198-{k:04d}" for k in range(20)]
    alphas = [anonymizer.alpha(utt) for utt in ids]
    assert all(0.5 <= a <= 0.9 for a in alphas)
    assert len(set(alphas)) == len(alphas)
    assert alphas == [McAdamsAnonymizer(seed=11).alpha(utt) for utt in ids]
    assert alphas != [McAdamsAnonymizer(seed=12).alpha(utt) for utt in ids]
    first, again = anonymizer(speech, ids[0]), McAdamsAnonymizer(seed=11)(speech, ids[0])
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, anonymizer(speech, ids[1]), atol=1e-3)
    assert McAdamsAnonymizer(alpha_low=0.7, alpha_high=0.7).alpha("x") == 0.7
    with pytest.raises(ValueError, match="alpha_low"):
        McAdamsAnonymizer(alpha_low=0.9, alpha_high=0.5)


def test_anonymize_kaldi_folder_resumes(vpac_root, tmp_path):
    source = vpac_root / "B3" / "data" / "libri_dev_trials_f_B3"
    before = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()}
    out = tmp_path / "libri_dev_trials_f_MCADAMS"
    anonymizer = McAdamsAnonymizer(seed=5)
    report = anonymize_folder(source, out, anonymizer, root=vpac_root, progress=False)
    folder = load_kaldi_folder(out)
    original = load_kaldi_folder(source, root=vpac_root)
    assert report.written == len(original.wav) and report.skipped == 0
    assert folder.utt2spk == original.utt2spk and folder.spk2gender == original.spk2gender
    assert folder.trials == original.trials and folder.text == original.text
    for utt in folder.wav:
        anon, orig = read_audio(folder.wav[utt]), read_audio(original.wav[utt])
        assert len(anon) == len(orig)
        assert folder.utt2dur[utt] == pytest.approx(len(orig) / 16000, abs=1e-3)
    assert set(read_kaldi_map(out / "utt2alpha")) == set(folder.wav)
    # The input is untouched; a rerun keeps what exists and redoes a removed file.
    assert before == {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()}
    victim = out / "wav" / f"{folder.utterances[0]}.wav"
    victim.unlink()
    again = anonymize_folder(source, out, anonymizer, root=vpac_root, progress=False)
    assert again.written == 1 and again.skipped == len(folder.wav) - 1
    with pytest.raises(ValueError, match="refusing to overwrite"):
        anonymize_folder(source, source, anonymizer, root=vpac_root, progress=False)


def test_recipe_on_audio_folder_layout(librispeech_dir, tmp_path):
    """The command: a folder of audio in, a whole-system layout out (sets mode), ogg output."""
    sets = tmp_path / "in"
    (sets / "libri_dev_enrolls").mkdir(parents=True)
    for name in ("19-198-0000", "26-495-0007"):
        (sets / "libri_dev_enrolls" / f"{name}.flac").write_bytes(
            (librispeech_dir / f"{name}.flac").read_bytes()
        )
    (sets / "libri_dev_enrolls" / "spk2gender").write_text("19 f\n26 m\n")
    (sets / "libri_dev_enrolls" / "text").write_text("19-198-0000 NORTHANGER ABBEY\n")
    command = [
        sys.executable,
        str(REPO / "recipes" / "anonymize.py"),
        str(REPO / "hparams" / "anonymize.yaml"),
        f"--input_folder={sets}",
        f"--output_folder={tmp_path / 'out'}",
        "--system=MYANON",
        "--sets=[libri_dev_enrolls]",
        "--audio_format=ogg",
        "--peak=0.9",
    ]
    subprocess.run(command, check=True, capture_output=True, cwd=tmp_path)
    out = tmp_path / "out" / "MYANON" / "data" / "libri_dev_enrolls_MYANON"
    folder = load_kaldi_folder(out)
    assert sorted(folder.wav) == ["19-198-0000", "26-495-0007"]
    assert folder.spk2gender == {"19": "f", "26": "m"} and folder.text["19-198-0000"] == "NORTHANGER ABBEY"
    audio = read_audio(folder.wav["19-198-0000"])
    assert len(audio) == len(read_audio(librispeech_dir / "19-198-0000.flac"))
    assert np.abs(audio).max() < 1.0

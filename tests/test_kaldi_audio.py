"""Kaldi-style lists, VPAC folder lookup and audio reading: errors name file and line."""

import numpy as np
import pytest
import soundfile

from segreconcat_aug.data.audio import AudioFile, AudioReadError, audio_duration, read_audio
from segreconcat_aug.data.kaldi import (
    KaldiFormatError,
    PipeCommand,
    load_kaldi_folder,
    read_kaldi_map,
    read_trials,
    read_wav_scp,
)
from segreconcat_aug.data.vpac import VPACLayoutError, system_folders


def test_kaldi_map_errors_name_file_and_line(tmp_path):
    path = tmp_path / "utt2spk"
    path.write_text("a s1\n\nb\n")
    with pytest.raises(KaldiFormatError, match=r"utt2spk:3: expected '<key> <value>'"):
        read_kaldi_map(path)
    path.write_text("a s1\nb s2\na s3\n")
    with pytest.raises(KaldiFormatError, match=r"utt2spk:3: key 'a' already defined on line 1"):
        read_kaldi_map(path)


def test_trials_format(tmp_path):
    path = tmp_path / "trials"
    path.write_text("1462 1462-170142-0000 target\n1462 2412-153948-0000 nontarget\n")
    trials = read_trials(path)
    assert [t.target for t in trials] == [True, False] and trials[1].line == 2
    path.write_text("1462 1462-170142-0000 target\n1462 x maybe\n")
    with pytest.raises(KaldiFormatError, match=r"trials:2: expected"):
        read_trials(path)


def test_wav_scp_relative_paths_and_pipes(tmp_path):
    root = tmp_path / "root"
    folder = root / "B3" / "data" / "x_B3"
    (folder / "wav").mkdir(parents=True)
    (folder / "wav" / "u1.wav").touch()
    scp = folder / "wav.scp"
    scp.write_text("u1 B3/data/x_B3/wav/u1.wav\nu2 wav/u1.wav\n")
    resolved = read_wav_scp(scp, root=root)
    assert resolved["u1"] == str(root / "B3/data/x_B3/wav/u1.wav")
    assert resolved["u2"] == str(folder / "wav/u1.wav")  # relative to the folder
    scp.write_text("u1 flac -c -d -s u1.flac |\n")
    with pytest.raises(KaldiFormatError, match="'u1' is a shell pipe"):
        read_wav_scp(scp)
    assert read_wav_scp(scp, allow_pipes=True)["u1"] == PipeCommand("flac -c -d -s u1.flac")


def test_folder_needs_a_speaker_for_every_utterance(tmp_path):
    (tmp_path / "wav.scp").write_text("u1 a.wav\nu2 b.wav\n")
    (tmp_path / "utt2spk").write_text("")
    with pytest.raises(KaldiFormatError, match="utt2spk: empty"):
        load_kaldi_folder(tmp_path)
    (tmp_path / "utt2spk").write_text("u1 s\n")
    with pytest.raises(
        KaldiFormatError, match=r"1 utterance\(s\) of wav.scp have no speaker, first: \['u2'\]"
    ):
        load_kaldi_folder(tmp_path)


def test_vpac_layout_errors(vpac_root):
    with pytest.raises(VPACLayoutError, match=r"system 'T99' not found.*\['B3', 'T8-5'"):
        system_folders(vpac_root, "T99")
    with pytest.raises(VPACLayoutError, match="folder for 'train-clean-360' not found.*folder_overrides"):
        system_folders(vpac_root, "B3", {"B3": {"train-clean-360": "libri360_anon_B3"}})
    folder = system_folders(vpac_root, "T8-5")["libri_dev_trials_m"]
    assert load_kaldi_folder(folder, root=vpac_root).trials


def test_read_audio_real_flac_and_errors(librispeech_dir, tmp_path):
    path = librispeech_dir / "19-198-0000.flac"
    audio = read_audio(path)
    assert audio.dtype == np.float32 and len(audio) == soundfile.info(str(path)).frames
    assert audio_duration(path) == pytest.approx(len(audio) / 16000)
    with pytest.raises(AudioReadError, match="missing.wav: cannot read audio"):
        read_audio(tmp_path / "missing.wav")
    soundfile.write(tmp_path / "8k.wav", audio[:8000], 8000)
    with pytest.raises(AudioReadError, match="8k.wav: sample rate 8000 Hz, expected 16000 Hz"):
        read_audio(tmp_path / "8k.wav")
    assert len(read_audio(tmp_path / "8k.wav", resample=True)) == 16000


def test_audio_file_reads_spans_equal_to_slices_of_the_whole(librispeech_dir, tmp_path):
    path = librispeech_dir / "19-198-0001.flac"  # FLAC: seeking decodes from a frame boundary
    whole = read_audio(path)
    with AudioFile(path) as audio:
        assert audio.frames == len(whole)
        for start, stop in ((0, 10), (48000, 96000), (len(whole) - 5, len(whole) + 100), (7, 7)):
            np.testing.assert_array_equal(audio.read(start, stop), whole[start:stop])
    # Vorbis: libsndfile's seeking is approximate there (spans came back shifted or short),
    # so spans are sliced from one whole read; random spans must equal read_audio's.
    soundfile.write(tmp_path / "lossy.ogg", whole, 16000, format="OGG", subtype="VORBIS")
    lossy = read_audio(tmp_path / "lossy.ogg")
    rng = np.random.default_rng(0)
    with AudioFile(tmp_path / "lossy.ogg") as audio:
        assert not audio.exact_seek and audio.frames == len(lossy)
        for start in rng.integers(0, len(lossy), 40):
            stop = start + int(rng.integers(1, 48000))
            np.testing.assert_array_equal(audio.read(start, stop), lossy[start:stop])
    for start in rng.integers(0, len(whole), 40):  # exact seeks in FLAC, from a fresh open each time
        stop = start + int(rng.integers(1, 48000))
        with AudioFile(path) as audio:
            assert audio.exact_seek
            np.testing.assert_array_equal(audio.read(start, stop), whole[start:stop])
    with AudioFile(path) as audio:  # a few ranges, one seek each; zeros between them
        ranges = [[1000, 1500], [9000, 9100], [30000, 48000]]
        expected = np.zeros(48000 - 1000, dtype=np.float32)
        for a, b in ranges:
            expected[a - 1000 : b - 1000] = whole[a:b]
        np.testing.assert_array_equal(audio.read_ranges(ranges), expected)
    with AudioFile(tmp_path / "lossy.ogg") as audio:
        np.testing.assert_array_equal(audio.read_ranges([[10, 20], [500, 900]]), lossy[10:900])
    stereo = np.stack([whole[:16000], -0.5 * whole[:16000]], axis=1)
    soundfile.write(tmp_path / "stereo.wav", stereo, 16000, subtype="FLOAT")
    with AudioFile(tmp_path / "stereo.wav") as audio:
        np.testing.assert_array_equal(audio.read(100, 900), read_audio(tmp_path / "stereo.wav")[100:900])
    with pytest.raises(AudioReadError, match="missing.wav: cannot read audio"):
        AudioFile(tmp_path / "missing.wav")
    soundfile.write(tmp_path / "8k.wav", whole[:8000], 8000)
    with pytest.raises(AudioReadError, match="8k.wav: sample rate 8000 Hz, expected 16000 Hz"):
        AudioFile(tmp_path / "8k.wav")

"""The ecapa_ssl attacker in the recipes (hparams/ecapa_ssl_segreconcat.yaml): fine-tuned from a folder in
the challenge's format, resumed, exported, evaluated; what WavLM sees under each ``ssl_input``; wrong
checkpoints refused. Tiny random models (tests/tiny_models.py) on the VPC 2026 Track 1 fixture layout."""

import json
import logging
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TINY_ECAPA_SSL, tiny_challenge_folder, tiny_wavlm
from vpc2026_fixture import build_track1_layout

from segreconcat_aug.cli import load_hparams
from segreconcat_aug.errors import UserError
from segreconcat_aug.evaluation.embeddings import EmbeddingExtractor
from segreconcat_aug.models import ecapa_ssl
from segreconcat_aug.models.ecapa_ssl import EcapaSSLEncoder, load_challenge_folder
from segreconcat_aug.models.folder import load_speaker_model
from segreconcat_aug.models.pretrained import PretrainedModelError, check_training_model, read_pretrained
from segreconcat_aug.models.wavlm import WavLMLayers, layer_norm_waveforms
from segreconcat_aug.training import waveform_embedding
from segreconcat_aug.training.run_settings import saved_hparams

REPO = Path(__file__).resolve().parents[1]
HPARAMS = str(REPO / "hparams" / "ecapa_ssl_segreconcat.yaml")
TINY = [
    "--channels=[16,16,16,16,48]",
    "--attention_channels=8",
    "--se_channels=8",
    "--lin_neurons=12",
    "--batch_size=8",
    "--num_workers=0",
    "--sentence_len=2.0",
    "--check_workers=2",
    "--device=cpu",
    "--evaluate_after_training=False",
]


from test_vpc2026 import train_recipe  # noqa: E402  (recipes/train.py, loaded once)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vpc2026_root")
    build_track1_layout(folder)
    return folder


@pytest.fixture(scope="module")
def challenge(tmp_path_factory):
    """A tiny folder as the challenge's download leaves exp/asv_ssl/ (toolkit names, unilm WavLM)."""
    return tiny_challenge_folder(tmp_path_factory.mktemp("exp") / "asv_ssl", seed=3)


def _argv(data_root, out, wavlm, *extra):
    return [
        HPARAMS,
        f"--data_folder={data_root}",
        "--system=B3",
        f"--output_folder={out}",
        f"--wavlm_checkpoint={wavlm}",
        *TINY,
        *extra,
    ]


def _waves(seconds=(1.5, 1.0)):
    rng = np.random.default_rng(7)
    longest = int(max(seconds) * 16000)
    wavs = torch.zeros(len(seconds), longest)
    for row, length in enumerate(seconds):
        wavs[row, : int(length * 16000)] = torch.from_numpy(
            rng.normal(0, 0.1, int(length * 16000)).astype("float32")
        )
    return wavs, torch.tensor([length / max(seconds) for length in seconds])


def test_fine_tune_from_a_challenge_folder_resumes_exports_and_evaluates(data_root, challenge, tmp_path):
    """(a) exp/asv_ssl/ read by the ecapa_ssl family fits the training YAML's modules and gives the
    challenge model's embeddings; the run trains, resumes, exports; evaluation embeds with the export."""
    pretrained = read_pretrained(challenge)
    assert pretrained.family == "ecapa_ssl" and set(pretrained.states) == {"embedding_model"}
    wavlm = pretrained.hparams["wavlm_checkpoint"]
    assert Path(wavlm) == challenge / "WavLM-Large.pt"
    overrides = {
        "data_folder": str(data_root),
        "output_folder": str(tmp_path / "probe"),
        "wavlm_checkpoint": wavlm,
        "channels": [16, 16, 16, 16, 48],
        "attention_channels": 8,
        "se_channels": 8,
        "lin_neurons": 12,
    }
    hparams = load_hparams(HPARAMS, overrides)
    check_training_model(pretrained, hparams["modules"], training=HPARAMS)
    # The training's modules now embed as the challenge folder's attacker does.
    wavs, lengths = _waves()
    reference = load_challenge_folder(challenge, **TINY_ECAPA_SSL)
    hparams["embedding_model"].eval()
    with torch.no_grad():
        ours = hparams["embed_batch"](hparams["modules"], wavs, lengths, batch=None)
        theirs = reference(wavs, lengths)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    # Evaluation loads the challenge folder itself (no hyperparams.yaml) through the family.
    speaker = load_speaker_model(challenge, {"sample_rate": 16000}, savedir=tmp_path / "links")
    assert speaker.loader == "ecapa_ssl" and challenge / "WavLM-Large.pt" in speaker.files
    speaker.embedding_model.eval()  # as EmbeddingExtractor puts it
    with torch.no_grad():
        direct = speaker.embedding_model(
            speaker.mean_var_norm(speaker.compute_features(wavs), lengths), lengths
        )
    torch.testing.assert_close(direct, theirs, rtol=1e-5, atol=1e-6)

    out = tmp_path / "run"
    # recipes/train.py --init_from=<exp/asv_ssl>: the challenge's weights, its WavLM, its sizes.
    train_recipe.main(_argv(data_root, out, wavlm, "--number_of_epochs=1", f"--init_from={challenge}"))
    settings = saved_hparams(out)
    assert settings["init_from"] == str(challenge) and settings["channels"] == [16, 16, 16, 16, 48]
    saved = sorted((out / "save").glob("CKPT*"))
    assert len(saved) == 1 and not any("wavlm" in path.name for path in saved[0].iterdir())
    ckpt = torch.load(saved[0] / "embedding_model.ckpt", map_location="cpu")
    assert not any(key.startswith(("wavlm", "model.")) for key in ckpt)  # WavLM is not checkpointed
    train_recipe.main(
        _argv(data_root, out, wavlm, "--number_of_epochs=2", f"--init_from={challenge}")
    )  # more epochs: a resume
    epochs = [json.loads(line)["epoch"] for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]
    export = out / "export"
    assert "EcapaSSLOnWaves" in (export / "hyperparams.yaml").read_text()
    model = load_speaker_model(export, {"sample_rate": 16000}, savedir=tmp_path / "links2")
    assert model.loader == "EncoderClassifier" and Path(wavlm) in model.files  # in the cache's name
    extractor = EmbeddingExtractor(
        model.compute_features, model.mean_var_norm, model.embedding_model, normalize_wave="vpc2026"
    )
    wav = sorted((data_root / "data").glob("libri_dev_enrolls_B3/wav/*.wav"))[0]
    embedding = extractor.embed_batch([wav])
    assert embedding.shape == (1, 12) and np.isfinite(embedding).all()
    # The export embeds with the trained weights (not the challenge's any more).
    trained = torch.load(export / "embedding_model.ckpt", map_location="cpu")
    torch.testing.assert_close(
        model.embedding_model.state_dict()["fc.conv.weight"], trained["fc.conv.weight"]
    )
    # recipes/evaluate.py without --wavlm_checkpoint: the export names its WavLM.
    import runpy

    evaluate = runpy.run_path(str(REPO / "recipes" / "evaluate.py"))["main"]
    evaluate([HPARAMS, f"--data_folder={data_root}", "--system=B3", f"--output_folder={out}", *TINY])
    assert json.loads((out / "eval" / "results.json").read_text())["subsets"]


def test_segreconcat_audio_not_the_file_reaches_wavlm(data_root, challenge, tmp_path, monkeypatch):
    """(b) same_window: WavLM's input is each batch row (SegReConcat's rearranged, concatenated crop) layer-
    normalized, and the training never reads a file for WavLM: the hook's reader fails if called."""
    seen, rows = [], []
    forward = WavLMLayers.forward
    embed_batch = EcapaSSLEncoder.embed_batch

    def spy_forward(self, wavs):
        seen.append(wavs.detach().clone())
        return forward(self, wavs)

    def spy_embed(self, wavs, lengths=None, **kwargs):
        rows.append((wavs.detach().clone(), lengths.detach().clone()))
        return embed_batch(self, wavs, lengths, **kwargs)

    def no_read(path, **kwargs):
        raise AssertionError(f"WavLM read {path} under same_window")

    monkeypatch.setattr(WavLMLayers, "forward", spy_forward)
    monkeypatch.setattr(EcapaSSLEncoder, "embed_batch", spy_embed)
    monkeypatch.setattr(waveform_embedding, "read_audio", no_read)
    out = tmp_path / "run"
    train_recipe.main(_argv(data_root, out, challenge / "WavLM-Large.pt", "--number_of_epochs=1"))
    assert rows and len(seen) == len(rows)
    augmented = json.loads((out / "epochs.jsonl").read_text().splitlines()[0])["train"]["augmented"]
    assert augmented > 0  # the rows are SegReConcat's
    for (wavs, lengths), wavlm_input in zip(rows, seen):
        torch.testing.assert_close(wavlm_input, layer_norm_waveforms(wavs, lengths))


def test_file_window_reads_each_rows_file(challenge, librispeech_dir):
    """(b) file_window: WavLM gets each row's file, re-read, in a 10 s window, not the batch row."""
    files = sorted(Path(librispeech_dir).rglob("*.flac"))[:2]
    read = []
    embedder = waveform_embedding.EcapaSSLBatchEmbedder(
        ecapa_ssl.EcapaSSL(**TINY_ECAPA_SSL), challenge / "WavLM-Large.pt", ssl_input="file_window"
    )
    real_read = embedder.read
    embedder.read = lambda path: read.append(path) or real_read(path)
    seen = []
    forward = embedder.wavlm.forward
    embedder.wavlm.forward = lambda wavs: seen.append(wavs) or forward(wavs)
    modules = torch.nn.ModuleDict(
        {
            "embedding_model": ecapa_ssl.EcapaSSL(**TINY_ECAPA_SSL),
            "compute_features": ecapa_ssl.Fbank(n_mels=80),
            "mean_var_norm": ecapa_ssl.InputNormalization(norm_type="sentence", std_norm=False),
        }
    )
    wavs, lengths = _waves((1.0, 1.0))
    batch = types.SimpleNamespace(wav=[str(path) for path in files], id=["a@0", "b@0"])
    embeddings = embedder(modules, wavs, lengths, batch=batch, epoch=1)
    assert embeddings.shape == (2, 1, 12)
    assert read == [str(path) for path in files]
    assert seen[0].shape == (2, 160000)  # the toolkit's 10 s, not the 1 s rows


def test_a_checkpoint_that_does_not_fit_is_refused_naming_its_parameters(data_root, challenge, tmp_path):
    """(c) init_from's check: a challenge folder of other sizes names the weights that differ, in one line."""
    other = tiny_challenge_folder(tmp_path / "asv_ssl", lin_neurons=6)
    pretrained = read_pretrained(other)
    hparams = load_hparams(
        HPARAMS,
        {
            "data_folder": str(data_root),
            "output_folder": str(tmp_path / "probe"),
            "wavlm_checkpoint": str(challenge / "WavLM-Large.pt"),
            **{key: value for key, value in TINY_ECAPA_SSL.items()},
        },
    )
    with pytest.raises(PretrainedModelError) as error:
        check_training_model(pretrained, hparams["modules"], training=HPARAMS)
    message = str(error.value)
    assert "\n" not in message and "fc.conv" in message and "(6, 96, 1)" in message


def test_a_wavlm_that_does_not_feed_the_model_stops_the_run_with_exit_2(data_root, tmp_path, capsys):
    """(c) A WavLM of another width: one line, exit 2, and no output folder written."""
    narrow = tiny_challenge_folder(tmp_path / "narrow", wavlm=tiny_wavlm(encoder_embed_dim=24))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        from segreconcat_aug.cli import run_main

        run_main(train_recipe.main, _argv(data_root, out, narrow / "WavLM-Large.pt"))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("width 24" in line and "wavlm_checkpoint" in line for line in err)
    assert not out.exists()
    # The run's log file went with its folder: the caller's next record is not sent there.
    assert not [h for h in logging.getLogger().handlers if str(out) in getattr(h, "baseFilename", "")]
    logging.getLogger("segreconcat_aug").info("the caller goes on")
    assert "Logging error" not in capsys.readouterr().err


def test_options_refuse_specaug_and_a_missing_wavlm(data_root, tmp_path):
    with pytest.raises(UserError, match="specaug: True"):
        train_recipe.main(_argv(data_root, tmp_path / "a", tmp_path / "none.pt", "--specaug=True"))
    with pytest.raises(UserError, match="wavlm_checkpoint: null"):
        train_recipe.main([HPARAMS, f"--data_folder={data_root}", f"--output_folder={tmp_path / 'b'}", *TINY])
    with pytest.raises(UserError, match="ssl_input"):
        train_recipe.main(_argv(data_root, tmp_path / "c", tmp_path / "none.pt", "--ssl_input=elsewhere"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_another_wavlm_behind_the_same_checkpoint_gets_another_embedding_cache(challenge, tmp_path):
    """The embedding cache is named by every file that decides the embeddings: the WavLM's bytes too, so a
    WavLM swapped behind an unchanged embedding_model.ckpt is embedded again, not read from the old cache."""
    import shutil

    from segreconcat_aug.models.wavlm import unilm_checkpoint

    folder = tmp_path / "asv_ssl"
    shutil.copytree(challenge, folder)
    before = load_speaker_model(folder, {"sample_rate": 16000}, savedir=tmp_path / "a").cache_options()
    again = load_speaker_model(folder, {"sample_rate": 16000}, savedir=tmp_path / "b").cache_options()
    torch.save(unilm_checkpoint(tiny_wavlm(seed=4)), folder / "WavLM-Large.pt")
    swapped = load_speaker_model(folder, {"sample_rate": 16000}, savedir=tmp_path / "c").cache_options()
    assert before == again and swapped != before


def test_an_export_trained_with_a_relative_wavlm_path_works_from_another_folder(
    data_root, challenge, tmp_path, monkeypatch
):
    import shutil

    from segreconcat_aug.models.state_dicts import CheckpointError

    (tmp_path / "w").mkdir()
    shutil.copyfile(challenge / "WavLM-Large.pt", tmp_path / "w" / "WavLM-Large.pt")
    monkeypatch.chdir(tmp_path)
    train_recipe.main(_argv(data_root, tmp_path / "run", "w/WavLM-Large.pt", "--number_of_epochs=1"))
    export = tmp_path / "run" / "export"
    wavlm = tmp_path / "w" / "WavLM-Large.pt"
    stored = " ".join((export / "hyperparams.yaml").read_text().split())  # the YAML may fold the line
    assert f"wavlm_checkpoint: {wavlm} " in stored  # stored absolute
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    model = load_speaker_model(export, {"sample_rate": 16000}, savedir=tmp_path / "links")
    assert wavlm in model.files
    wavlm.unlink()  # the export names its WavLM by path: a missing one is one line with the fix
    with pytest.raises(CheckpointError) as refused:
        load_speaker_model(export, {"sample_rate": 16000}, savedir=tmp_path / "links2")
    assert str(refused.value) == (
        f"{export / 'hyperparams.yaml'}: its wavlm_checkpoint {wavlm} is not a file: put the WavLM file "
        f"there, or set wavlm_checkpoint in {export / 'hyperparams.yaml'} to where it is (an absolute path)"
    )


def test_a_folder_of_the_other_model_type_is_refused_naming_the_yaml_to_use(
    data_root, challenge, tmp_path, capsys
):
    """An exp/asv_ssl folder under the ECAPA YAML, and an ECAPA folder under this one: one line naming
    the folder's model type and the YAML that trains it, before anything is written."""
    from model_folders import SMALL, hub_folder

    from segreconcat_aug.cli import run_main

    hub, _ = hub_folder(tmp_path / "hub", SMALL)
    ecapa_yaml = str(REPO / "hparams" / "ecapa_segreconcat.yaml")
    cases = [
        ([ecapa_yaml, f"--init_from={challenge}"], ["ecapa_ssl model", "hparams/ecapa_ssl_segreconcat.yaml"]),
        (
            [HPARAMS, f"--init_from={hub}"],
            [f"{hub} holds a model of the ", "needs an ecapa_ssl folder", "ecapa_segreconcat.yaml"],
        ),
    ]
    for k, (head, fragments) in enumerate(cases):
        out = tmp_path / f"run{k}"
        argv = [*head, f"--data_folder={data_root}", "--system=B3", f"--output_folder={out}", "--device=cpu"]
        with pytest.raises(SystemExit) as stop:
            run_main(train_recipe.main, argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(fragment in err[0] for fragment in fragments), err
        assert not out.exists()


def test_the_yaml_is_the_ecapa_yaml_with_its_own_keys_replacing_whole():
    """hparams/ecapa_ssl_segreconcat.yaml holds what differs (base_hparams); its model replaces the
    ECAPA-TDNN whole (HyperPyYAML's overrides would keep the base's class), built where the base's was."""
    import ruamel.yaml

    from segreconcat_aug.data.hparams_text import hparams_text

    composed = ruamel.yaml.YAML().load(hparams_text(HPARAMS))
    base = ruamel.yaml.YAML().load((REPO / "hparams" / "ecapa_segreconcat.yaml").read_text())
    assert set(base) <= set(composed) and "base_hparams" not in composed
    assert composed["embedding_model"].tag.value == "!new:segreconcat_aug.models.ecapa_ssl.EcapaSSL"
    assert composed["optimizer"] == "adamw" and composed["train_log"].value == base["train_log"].value
    keys = list(composed)
    assert keys.index("embedding_model") < keys.index("embed_batch") < keys.index("classifier")

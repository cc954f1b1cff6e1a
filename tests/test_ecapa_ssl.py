"""The VPC 2026 attacker ``ecapa_ssl``: equal to the toolkit's and DAST's ECAPA_TDNN_test, its files loaded
or refused, and WavLM fed the training rows (not the files) by default."""

import numpy as np
import pytest
import torch
from reference_fixtures import DAST_REFERENCE, ECAPA_SSL_REFERENCE, load_reference, one_thread, unpack_state  # noqa: F401
from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
from tiny_models import TINY_ECAPA_SSL, tiny_challenge_folder, tiny_wavlm

from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.errors import MissingInputError, UserError
from segreconcat_aug.models.ecapa_ssl import (
    CHALLENGE_CHECKPOINT,
    CHALLENGE_WAVLM,
    EcapaSSL,
    EcapaSSLEncoder,
    file_window_inputs,
    from_challenge_state_dict,
    load_challenge_checkpoint,
    load_challenge_folder,
    resample_frames,
    to_challenge_state_dict,
)
from segreconcat_aug.models.state_dicts import CheckpointError, CheckpointMismatchError
from segreconcat_aug.models.wavlm import layer_norm_waveforms

TOLERANCE = 1e-5


# The VPC 2026 toolkit's ECAPA_TDNN_test and DAST's (the same class; DAST stacks WavLM's layers otherwise).
@pytest.fixture(scope="module", params=[ECAPA_SSL_REFERENCE, DAST_REFERENCE], ids=["vpc2026", "dast"])
def reference(request):
    arrays, made_with = load_reference(request.param)
    state = unpack_state(arrays["state_dict"], made_with["state_dict_layout"])
    return arrays, made_with, state


def _model(made_with, state, **changes):
    model = EcapaSSL(**{**made_with["config"], **changes})
    model.load_state_dict(from_challenge_state_dict(state))
    return model


def test_equal_to_the_toolkits_model_in_eval_mode(reference):
    """Both resample directions and the identity, without and with unequal lengths in the batch."""
    arrays, made_with, state = reference
    model = _model(made_with, state).eval()
    x, features = arrays["x"], arrays["features"]
    assert features.shape[1] == 24 and features.shape[-1] == made_with["config"]["channels"][0]
    with torch.no_grad():
        for case, frames in made_with["cases"].items():
            for suffix, lengths in (("", None), ("_lengths", arrays["lengths"])):
                expected = arrays[f"outputs/{case}{suffix}"]
                got = model(x, features[:, :, :frames], lengths)
                assert got.shape == expected.shape == (2, 1, made_with["config"]["lin_neurons"])
                assert (got - expected).abs().max() <= TOLERANCE, (case, suffix)
    # The cases differ from one another: the comparison can fail.
    assert (arrays["outputs/more"] - arrays["outputs/fewer"]).abs().max() > 1e-3
    assert (arrays["outputs/more"] - arrays["outputs/more_lengths"]).abs().max() > 1e-4


def test_equal_to_the_toolkits_model_in_a_training_step(reference):
    """Batch statistics, the gradient reaching the 24 layer weights and the running means after the step."""
    arrays, made_with, state = reference
    model = _model(made_with, state, dropout=0.0).train()
    x, features, lengths = arrays["x"], arrays["features"], arrays["lengths"]
    out = model(
        torch.cat([x, x.flip(1)]),
        torch.cat([features, features.flip(2)]),
        torch.cat([lengths, lengths.flip(0)]),
    )
    out.pow(2).sum().backward()
    assert (out.detach() - arrays["train/output"]).abs().max() <= TOLERANCE
    grad, expected = model.ssl_layer_sum.weights.grad, arrays["train/layer_weights_grad"]
    assert (grad - expected).abs().max() <= 1e-4 * expected.abs().max()
    after = model.state_dict()
    assert torch.allclose(
        after["ssl_blocks.3.tdnn2.norm.norm.running_mean"],
        arrays["train/running_mean_blocks_features_3"],
        atol=1e-6,
    )
    assert torch.allclose(after["mfa.norm.norm.running_mean"], arrays["train/running_mean_mfa"], atol=1e-6)


def test_resample_frames_is_the_toolkits_resample_tensor(reference):
    arrays, _, _ = reference
    for key, expected in arrays.items():
        for prefix, series in (
            ("resample/outputs/", arrays["resample/input"]),
            ("resample/short_outputs/", arrays["resample/short"]),
        ):
            if key.startswith(prefix):
                target = int(key.rsplit("/", 1)[1])
                assert torch.allclose(resample_frames(series, target), expected, atol=1e-6), key


def test_challenge_names_map_both_ways(reference):
    _, made_with, state = reference
    ours = from_challenge_state_dict({f"module.{name}": value for name, value in state.items()})
    assert "ssl_layer_sum.weights" in ours and any(name.startswith("ssl_blocks.") for name in ours)
    assert not any(name.startswith(("blocks_features.", "weighted_sum.", "module.")) for name in ours)
    assert set(ours) == set(EcapaSSL(**made_with["config"]).state_dict())
    back = to_challenge_state_dict(ours)
    assert list(back) == list(state) and all(torch.equal(back[name], state[name]) for name in state)


@pytest.fixture(scope="module")
def challenge_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exp") / "asv_ssl"
    return tiny_challenge_folder(folder, seed=3, wavlm=tiny_wavlm(seed=3))


@pytest.fixture(scope="module")
def encoder(challenge_folder):
    return load_challenge_folder(challenge_folder, **TINY_ECAPA_SSL)


def test_challenge_folder_loads_both_files(challenge_folder, encoder):
    saved = torch.load(challenge_folder / CHALLENGE_CHECKPOINT, weights_only=True)
    assert "weighted_sum.layer_weights" in saved  # the toolkit's names in the file
    assert torch.equal(encoder.embedding_model.ssl_layer_sum.weights, saved["weighted_sum.layer_weights"])
    assert encoder.wavlm.num_layers == 24 and encoder.wavlm.dim == TINY_ECAPA_SSL["channels"][0]
    assert encoder.wavlm.normalize and not encoder.training
    wavs = 0.1 * torch.randn(2, 8000, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        embeddings = encoder(wavs)
        by_hand = encoder.embedding_model(
            encoder.mean_var_norm(encoder.compute_features(wavs), torch.ones(2)),
            encoder.wavlm(layer_norm_waveforms(wavs)),
        )
    assert embeddings.shape == (2, 1, TINY_ECAPA_SSL["lin_neurons"])
    assert torch.allclose(embeddings, by_hand)
    # One of our checkpoints (our names, in {"state_dict": ...}) loads into the same model too.
    ours = challenge_folder.parent / "ours.ckpt"
    torch.save({"state_dict": encoder.embedding_model.state_dict()}, ours)
    again = load_challenge_checkpoint(EcapaSSL(**TINY_ECAPA_SSL), ours)
    assert all(
        torch.equal(a, b)
        for a, b in zip(again.state_dict().values(), encoder.embedding_model.state_dict().values())
    )


def _one_line(error) -> str:
    message = str(error.value)
    assert isinstance(error.value, UserError) and "\n" not in message
    return message


def test_a_checkpoint_that_does_not_fit_is_refused_naming_its_parameters(challenge_folder, tmp_path):
    # The challenge's default sizes against the tiny file: wrong shapes, named in the file's names.
    with pytest.raises(CheckpointMismatchError) as error:
        load_challenge_folder(challenge_folder)
    message = _one_line(error)
    assert str(challenge_folder / CHALLENGE_CHECKPOINT) in message
    assert "wrong shape" in message and "blocks.0.conv.conv.weight: file 16x80x5, model 1024x80x5" in message
    assert "weighted_sum.layer_weights" not in message  # 24 weights in both: only what differs
    # A plain SpeechBrain ECAPA (no WavLM branch) of the same sizes: the missing branch is named.
    plain = tmp_path / "plain"
    plain.mkdir()
    ecapa = ECAPA_TDNN(80, channels=TINY_ECAPA_SSL["channels"], attention_channels=8, lin_neurons=12)
    torch.save(ecapa.state_dict(), plain / CHALLENGE_CHECKPOINT)
    with pytest.raises(CheckpointMismatchError) as error:
        load_challenge_checkpoint(EcapaSSL(**TINY_ECAPA_SSL), plain / CHALLENGE_CHECKPOINT)
    message = _one_line(error)
    assert "missing" in message and "ssl_blocks.0." in message and "ssl_layer_sum.weights" in message
    assert "and " in message and "more" in message  # dozens of names: a few, then how many
    # Not a checkpoint at all, and no file.
    (plain / CHALLENGE_CHECKPOINT).write_text("not a checkpoint\n")
    with pytest.raises(CheckpointError) as error:
        load_challenge_checkpoint(EcapaSSL(**TINY_ECAPA_SSL), plain / CHALLENGE_CHECKPOINT)
    assert "not a PyTorch checkpoint" in _one_line(error)
    (plain / CHALLENGE_CHECKPOINT).unlink()
    with pytest.raises(MissingInputError) as error:
        load_challenge_folder(plain, **TINY_ECAPA_SSL)
    assert CHALLENGE_CHECKPOINT in _one_line(error)


def test_a_wavlm_that_does_not_feed_the_model_is_refused(challenge_folder, tmp_path):
    folder = tiny_challenge_folder(tmp_path / "asv_ssl", wavlm=tiny_wavlm(encoder_embed_dim=24))
    with pytest.raises(CheckpointError) as error:
        load_challenge_folder(folder, **TINY_ECAPA_SSL)
    assert "width 24" in _one_line(error) and "channels[0] = 16" in str(error.value)
    (folder / CHALLENGE_WAVLM).unlink()
    with pytest.raises(MissingInputError) as error:
        load_challenge_folder(folder, **TINY_ECAPA_SSL)
    assert CHALLENGE_WAVLM in _one_line(error)


def _wavlm_inputs(encoder):
    seen = []
    handle = encoder.wavlm.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    return seen, handle


def test_wavlm_gets_the_training_rows_not_the_file(encoder, librispeech_dir):
    """The default feeds both branches the batch's own samples (e.g. SegReConcat's audio); the toolkit's
    option re-reads each file. Fails if WavLM reads the file under the default."""
    file_path = str(librispeech_dir / "27-123349-0009.flac")  # 5.1 s: zero-padded to the toolkit's 10 s
    in_file = read_audio(file_path)
    row = read_audio(librispeech_dir / "26-495-0007.flac")[:48000]  # another speaker's 3 s, as a training row
    wavs = torch.from_numpy(np.stack([row, row[::-1].copy()]))
    reads = []

    def read(path):
        reads.append(path)
        return read_audio(path)

    seen, handle = _wavlm_inputs(encoder)
    try:
        with torch.no_grad():
            ours = encoder.embed_batch(wavs, paths=[file_path] * 2, keys=["u1", "u2"], read=read)
            assert reads == []  # the file is not read at all
            assert torch.allclose(seen[-1], layer_norm_waveforms(wavs), atol=1e-6)
            toolkit = encoder.embed_batch(
                wavs, ssl_input="file_window", paths=[file_path] * 2, keys=["u1", "u2"], read=read, seed=1
            )
    finally:
        handle.remove()
    assert reads == [file_path] * 2
    whole = layer_norm_waveforms(torch.from_numpy(in_file)[None])[0]
    assert seen[-1].shape == (2, 160000)  # the toolkit's 10 s, the file zero-padded to it
    assert torch.allclose(seen[-1][0, : whole.numel()], whole, atol=1e-6)
    assert not torch.allclose(seen[0][0], whole[: seen[0].shape[1]], atol=1e-2)  # the default: not the file
    assert (ours - toolkit).abs().max() > 1e-4  # what WavLM sees reaches the embedding


def _window_start(audio: torch.Tensor, window: torch.Tensor) -> int:
    """Where ``window`` starts in ``audio`` (by its first 32 samples, checked in full)."""
    head = (audio.unfold(0, 32, 1) - window[:32]).abs().amax(dim=1)
    start = int(head.argmin())
    assert torch.allclose(audio[start : start + window.numel()], window, atol=1e-6)
    return start


def test_file_window_crops_and_pads_like_the_toolkit_seeded(librispeech_dir):
    paths = [
        str(librispeech_dir / name) for name in ("19-198-0001.flac", "26-495-0007.flac")
    ]  # 11.8 s, 4.1 s
    audio = [layer_norm_waveforms(torch.from_numpy(read_audio(path))[None])[0] for path in paths]

    def windows(epoch):
        return file_window_inputs(paths, ["a", "b"], read=read_audio, seed=5, epoch=epoch, max_seconds=8.0)

    rows = windows(1)
    assert rows.shape == (2, 128000)
    # The longer file: a window of its normalized samples; the shorter: all of them, then zeros.
    _window_start(audio[0], rows[0])
    assert torch.equal(rows[1, : audio[1].numel()], audio[1]) and not rows[1, audio[1].numel() :].any()
    assert torch.equal(rows, windows(1))
    assert len({_window_start(audio[0], windows(epoch)[0]) for epoch in range(1, 6)}) > 1  # it moves


def test_only_the_embedding_model_learns(encoder):
    model = EcapaSSLEncoder(EcapaSSL(**TINY_ECAPA_SSL), encoder.wavlm)
    model.train()
    assert model.embedding_model.training and not model.wavlm.training and not model.wavlm.model.training
    wavs = 0.1 * torch.randn(3, 8000, generator=torch.Generator().manual_seed(1))
    model(wavs).pow(2).sum().backward()
    assert all(p.grad is None and not p.requires_grad for p in model.wavlm.parameters())
    assert model.embedding_model.ssl_layer_sum.weights.grad.abs().sum() > 0
    assert model.embedding_model.ssl_blocks[0].tdnn1.conv.conv.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="channels\\[0\\]"):
        model.embedding_model(torch.rand(1, 20, 80), torch.rand(1, 24, 9, 8))

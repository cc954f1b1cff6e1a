"""WavLM from unilm-format files through transformers: equal to unilm's own forward, refused in one line."""

import numpy as np
import pytest
import soundfile
import torch
import torch.nn.functional as F
from reference_fixtures import WAVLM_REFERENCE, load_reference, one_thread, unpack_state  # noqa: F401
from tiny_models import tiny_wavlm

from segreconcat_aug.errors import UserError
from segreconcat_aug.models.state_dicts import CheckpointError, CheckpointMismatchError
from segreconcat_aug.models.wavlm import (
    ATTENTION_PATHS,
    WavLMConfigError,
    layer_norm_waveforms,
    load_unilm_wavlm,
    parse_conv_layers,
    unilm_checkpoint,
    wavlm_from_unilm,
)

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def reference(librispeech_dir):
    arrays, made_with = load_reference(WAVLM_REFERENCE)
    waves = [
        soundfile.read(librispeech_dir / f"{utterance}.flac", dtype="float32")[0][start : start + 8000]
        for utterance, start in made_with["waves"]
    ]
    return arrays, made_with, torch.from_numpy(np.stack(waves))


def _checkpoint(arrays, made_with, name):
    return {
        "cfg": made_with["cfg"][name],
        "model": unpack_state(arrays[f"{name}/model"], made_with["layout"][name]),
    }


@pytest.mark.parametrize("name", ["large_like", "base_like"])
def test_layer_outputs_equal_unilms_wavlm(reference, name, tmp_path):
    """WavLM-Large's structure (pre-LN, layer-norm convolutions, normalized input) and WavLM-Base's,
    from a file in unilm's format, by both ways of running a layer."""
    arrays, made_with, waves = reference
    path = tmp_path / "WavLM.pt"
    torch.save(_checkpoint(arrays, made_with, name), path)
    expected = arrays[f"{name}/layers"]
    for attention in ATTENTION_PATHS:
        layers = load_unilm_wavlm(path, attention=attention)
        assert layers.normalize == made_with["cfg"][name].get("normalize", False)
        inputs = layer_norm_waveforms(waves) if layers.normalize else waves
        got = layers(inputs)
        assert got.shape == expected.shape and not got.requires_grad
        assert (got - expected).abs().max() <= TOLERANCE, attention
    assert (expected[:, -1] - expected[:, -2]).abs().max() > 0.1  # the layers differ: the check can fail


def test_a_transformers_wavlm_written_in_unilms_format_reads_back_the_same():
    layers = tiny_wavlm(seed=4)
    checkpoint = unilm_checkpoint(layers)
    assert "encoder.layers.0.self_attn.relative_attention_bias.weight" in checkpoint["model"]
    assert checkpoint["cfg"]["encoder_layers"] == 24 and checkpoint["cfg"]["layer_norm_first"]
    again = wavlm_from_unilm(checkpoint)
    wavs = layer_norm_waveforms(0.1 * torch.randn(2, 4000, generator=torch.Generator().manual_seed(0)))
    out = layers(wavs)
    assert out.shape == (2, 24, 12, 16)
    assert torch.equal(out, again(wavs))


def _refused(error) -> str:
    assert isinstance(error.value, UserError) and "\n" not in str(error.value)
    return str(error.value)


def test_a_wavlm_file_that_does_not_fit_is_refused_in_unilms_names(reference, tmp_path):
    arrays, made_with, _ = reference
    checkpoint = _checkpoint(arrays, made_with, "large_like")
    model = dict(checkpoint["model"])
    del model["encoder.layers.1.fc1.bias"]
    model["encoder.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 3)
    model["decoder.weight"] = torch.zeros(1)
    path = tmp_path / "WavLM.pt"
    torch.save({"cfg": checkpoint["cfg"], "model": model}, path)
    with pytest.raises(CheckpointMismatchError) as error:
        load_unilm_wavlm(path)
    message = _refused(error)
    assert str(path) in message and "4 layers of width 16" in message
    assert "missing 1 (encoder.layers.1.fc1.bias)" in message
    assert "unexpected 1 (decoder.weight)" in message
    assert "encoder.layers.0.self_attn.q_proj.weight: file 3x3, model 16x16" in message
    # A cfg transformers cannot express, a file of another format, a conv spec that is code.
    torch.save({**checkpoint, "cfg": {**checkpoint["cfg"], "gru_rel_pos": False}}, path)
    with pytest.raises(WavLMConfigError) as error:
        load_unilm_wavlm(path)
    assert "gru_rel_pos" in _refused(error)
    torch.save(checkpoint["model"], path)
    with pytest.raises(CheckpointError) as error:
        load_unilm_wavlm(path)
    assert "'cfg' and 'model'" in _refused(error)
    with pytest.raises(WavLMConfigError):
        parse_conv_layers("[(512,10,5)] + __import__('os').listdir('.')")


def test_layer_norm_waveforms_normalizes_each_row_over_its_own_samples():
    wavs = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2)) * torch.tensor(
        [[0.1], [1.0], [3.0]]
    )
    lengths = torch.tensor([1.0, 0.5, 0.731])
    out = layer_norm_waveforms(wavs, lengths)
    for row, length in zip(range(3), (1000, 500, 731)):
        assert torch.allclose(out[row, :length], F.layer_norm(wavs[row, :length], (length,)), atol=1e-5)
        assert not out[row, length:].any()

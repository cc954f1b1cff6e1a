"""Tiny random models for tests and benchmarks, built with no download: faster-whisper and
openai-whisper checkpoints, benchmark Whisper sizes, WavLM + ECAPA and a challenge-layout folder."""

from __future__ import annotations

import torch

from segreconcat_aug.testing import LETTERS, TEXT_BOOST, tiny_whisper


def tiny_faster_whisper(folder, seed: int = 0, **sizes) -> str:
    """:func:`tiny_whisper` converted to CTranslate2 in ``folder`` (for faster-whisper); its path.

    The same weights, vocabulary and suppressed tokens as :func:`tiny_whisper`, but CTranslate2
    takes a vocabulary under 51,865 tokens for an English-only model (no language and task tokens in
    the prompt), so the two backends' random words differ. ``sizes`` as there.
    """
    from pathlib import Path

    from ctranslate2.converters import TransformersConverter

    folder = Path(folder)
    source, target = folder / "transformers", folder / "ctranslate2"
    bundle = tiny_whisper(seed, **sizes)
    for part in (bundle.model, bundle.tokenizer, bundle.feature_extractor):
        part.save_pretrained(source)
    converter = TransformersConverter(str(source), copy_files=["tokenizer.json", "preprocessor_config.json"])
    converter.convert(str(target), force=True)
    return str(target)


OPENAI_TINY_DIMS = {
    "n_mels": 80,
    "n_audio_ctx": 1500,
    "n_audio_state": 64,
    "n_audio_head": 2,
    "n_audio_layer": 2,
    "n_vocab": 51864,  # openai-whisper's English-only tokenizer (GPT-2 + Whisper's special tokens)
    "n_text_ctx": 448,
    "n_text_state": 64,
    "n_text_head": 2,
    "n_text_layer": 2,
}


def tiny_openai_whisper(path, seed: int = 0, **dims) -> str:
    """A random openai-whisper checkpoint written to ``path`` (``whisper.load_model(path)`` loads it),
    its one-letter word rows scaled up as in :func:`tiny_whisper`; ``dims`` override
    :data:`OPENAI_TINY_DIMS`."""
    import dataclasses

    from whisper.model import ModelDimensions, Whisper
    from whisper.tokenizer import get_tokenizer

    dimensions = ModelDimensions(**{**OPENAI_TINY_DIMS, **dims})
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Whisper(dimensions)
        # openai-whisper leaves the decoder's positions uninitialized (torch.empty): a checkpoint
        # always fills them. Random ones keep the model (and its output) deterministic.
        torch.nn.init.normal_(model.decoder.positional_embedding, std=0.01)
    tokenizer = get_tokenizer(multilingual=dimensions.n_vocab >= 51865)
    word_starts = [tokenizer.encode(" " + letter)[0] for letter in LETTERS]
    with torch.no_grad():
        model.decoder.token_embedding.weight[word_starts] *= TEXT_BOOST
    state = {"dims": dataclasses.asdict(dimensions), "model_state_dict": model.state_dict()}
    torch.save(state, path)
    return str(path)


# Benchmark model sizes: Whisper's published base, small and medium, and a tiny one for plumbing.
WHISPER_SIZES = {
    "tiny": {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "heads": 2, "ffn": 128},
    "base": {"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "heads": 8, "ffn": 2048},
    "small": {"d_model": 768, "encoder_layers": 12, "decoder_layers": 12, "heads": 12, "ffn": 3072},
    "medium": {"d_model": 1024, "encoder_layers": 24, "decoder_layers": 24, "heads": 16, "ffn": 4096},
}


def transformers_sizes(name: str) -> dict:
    """:data:`WHISPER_SIZES` ``name`` as :func:`tiny_whisper` / :func:`tiny_faster_whisper` take them."""
    d = WHISPER_SIZES[name]
    return {
        "d_model": d["d_model"],
        "encoder_layers": d["encoder_layers"],
        "decoder_layers": d["decoder_layers"],
        "encoder_attention_heads": d["heads"],
        "decoder_attention_heads": d["heads"],
        "encoder_ffn_dim": d["ffn"],
        "decoder_ffn_dim": d["ffn"],
    }


def openai_sizes(name: str) -> dict:
    """:data:`WHISPER_SIZES` ``name`` as :func:`tiny_openai_whisper` takes them."""
    d = WHISPER_SIZES[name]
    return {
        "n_audio_state": d["d_model"],
        "n_audio_layer": d["encoder_layers"],
        "n_audio_head": d["heads"],
        "n_text_state": d["d_model"],
        "n_text_layer": d["decoder_layers"],
        "n_text_head": d["heads"],
    }


#: A tiny ``ecapa_ssl`` (the VPC 2026 attacker): WavLM-Large's structure, 24 layers of width 16, and an
#: embedding model of that width (``channels[0]`` must be WavLM's width).
TINY_WAVLM = {
    "encoder_layers": 24,
    "encoder_embed_dim": 16,
    "encoder_ffn_embed_dim": 32,
    "encoder_attention_heads": 2,
    "conv_feature_layers": "[(32,10,5)] + [(32,3,2)] * 4 + [(32,2,2)] * 2",
    "conv_pos": 16,
    "conv_pos_groups": 4,
}
TINY_ECAPA_SSL = {
    "channels": [16, 16, 16, 16, 48],
    "attention_channels": 8,
    "se_channels": 8,
    "lin_neurons": 12,
}


def tiny_wavlm(seed: int = 0, **cfg):
    """A random WavLM (transformers) shaped like WavLM-Large, as :class:`~.models.wavlm.WavLMLayers`.

    ``cfg``: unilm config keys over WavLM-Large's (``models.wavlm.WAVLM_LARGE``) and :data:`TINY_WAVLM`;
    ``tiny_wavlm(**WAVLM_LARGE)`` is the real size (random weights, for benchmarks).
    """
    from transformers import WavLMModel

    from segreconcat_aug.models.wavlm import WAVLM_LARGE, WavLMLayers, transformers_config

    unilm_cfg = {**WAVLM_LARGE, **TINY_WAVLM, **cfg}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = WavLMModel(transformers_config(unilm_cfg))
    return WavLMLayers(model.eval(), normalize=unilm_cfg["normalize"], unilm_cfg=unilm_cfg)


def tiny_challenge_folder(folder, seed: int = 0, *, wavlm=None, **sizes):
    """A folder laid out as the challenge's ``exp/asv_ssl/``: ``embedding_model.ckpt`` + ``WavLM-Large.pt``.

    The embedding model (:data:`TINY_ECAPA_SSL` and ``sizes``) is saved under the toolkit's parameter
    names, as its ``ECAPA_TDNN_test`` state dict; the WavLM (``wavlm``, default :func:`tiny_wavlm`) in
    unilm's ``{"cfg", "model"}`` format. Returns the folder's path.
    """
    from pathlib import Path

    from segreconcat_aug.models.ecapa_ssl import (
        CHALLENGE_CHECKPOINT,
        CHALLENGE_WAVLM,
        EcapaSSL,
        to_challenge_state_dict,
    )
    from segreconcat_aug.models.wavlm import unilm_checkpoint

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = EcapaSSL(**{**TINY_ECAPA_SSL, **sizes})
    torch.save(to_challenge_state_dict(model.state_dict()), folder / CHALLENGE_CHECKPOINT)
    torch.save(unilm_checkpoint(wavlm if wavlm is not None else tiny_wavlm(seed)), folder / CHALLENGE_WAVLM)
    return folder

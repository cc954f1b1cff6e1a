"""The training step's embedding of a model on waveforms (the ``ecapa_ssl`` attacker): the YAML's ``embed_batch``."""

from __future__ import annotations

import functools

import torch

from ..data.audio import read_audio
from ..models.ecapa_ssl import SSL_INPUTS, EcapaSSLEncoder, wavlm_for


class EcapaSSLBatchEmbedder:
    """``embed_batch(modules, wavs, lengths, *, batch, epoch)`` for the ``ecapa_ssl`` training YAML."""

    def __init__(
        self,
        embedding_model,
        wavlm_checkpoint,
        *,
        ssl_input: str = "same_window",
        trusted: bool = False,
        seed: int = 0,
        sample_rate: int = 16000,
    ):
        if ssl_input not in SSL_INPUTS:
            raise ValueError(f"ssl_input {ssl_input!r}: one of {SSL_INPUTS}")
        # None: no WavLM (an evaluation, which embeds with its model folder's own); training refuses it first.
        self.wavlm = (
            wavlm_for(embedding_model, wavlm_checkpoint, trusted=trusted) if wavlm_checkpoint else None
        )
        self.ssl_input = ssl_input
        self.seed = int(seed)
        self.read = functools.partial(read_audio, sample_rate=sample_rate, resample=True)

    def __call__(self, modules, wavs: torch.Tensor, lengths: torch.Tensor, *, batch, epoch: int = 0):
        model = modules["embedding_model"]
        inner = getattr(model, "module", model)  # DistributedDataParallel's module
        self.wavlm.to(wavs.device)
        encoder = EcapaSSLEncoder(inner, self.wavlm, modules["compute_features"], modules["mean_var_norm"])
        encoder.embedding_model = model  # through DDP when wrapped: gradients are synchronized
        file_window = self.ssl_input == "file_window"
        return encoder.embed_batch(
            wavs,
            lengths,
            ssl_input=self.ssl_input,
            paths=list(batch.wav) if file_window else None,
            keys=list(batch.id) if file_window else None,
            read=self.read,
            seed=self.seed,
            epoch=int(epoch or 0),
        )

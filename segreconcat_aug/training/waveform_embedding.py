"""The training step's embedding of a model on waveforms (the ``ecapa_ssl`` attacker): the YAML's ``embed_batch``.

``recipes/train.py`` embeds a batch with the YAML's ``embed_batch`` hook when it has one, instead of
features -> normalization -> ``embedding_model``. :class:`EcapaSSLBatchEmbedder` runs the batch through
:meth:`~segreconcat_aug.models.ecapa_ssl.EcapaSSLEncoder.embed_batch`: the training modules'
``compute_features``, ``mean_var_norm`` and ``embedding_model`` (the only one trained and
checkpointed) with the frozen WavLM of ``wavlm_checkpoint`` (eval mode, not a module of the Brain:
in no optimizer and no checkpoint). ``ssl_input`` chooses WavLM's input: ``same_window`` (the batch
rows, SegReConcat's audio) or ``file_window`` (each row's file re-read, the VPC 2026 toolkit's).
"""

from __future__ import annotations

import functools

import torch

from ..data.audio import read_audio
from ..models.ecapa_ssl import SSL_INPUTS, EcapaSSLEncoder, wavlm_for


class EcapaSSLBatchEmbedder:
    """``embed_batch(modules, wavs, lengths, *, batch, epoch)`` for the ``ecapa_ssl`` training YAML.

    The WavLM is read (and checked against ``embedding_model``) when the YAML is loaded, so a
    wrong file stops the run before training. ``batch`` must carry ``id`` and ``wav`` (the rows'
    files) under ``file_window``; ``seed`` and ``epoch`` seed its windows.
    """

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
        self.wavlm = wavlm_for(embedding_model, wavlm_checkpoint, trusted=trusted)
        self.ssl_input = ssl_input
        self.seed = int(seed)
        self.read = functools.partial(read_audio, sample_rate=sample_rate)

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

"""``ecapa_ssl``: the VPC 2026 challenge's (and DAST's) attacker, WavLM-Large + ECAPA, our implementation.

:class:`EcapaSSL` is the toolkit's ``ECAPA_TDNN_test`` (``evaluation/privacy/asv/ecapa_model_wavlm_24layer.py``,
VPC 2026 e6810a4; DAST's ``inference/dast_model.py`` is the same class), built of SpeechBrain's blocks;
``tests/test_ecapa_ssl.py`` holds it to both classes' outputs within 1e-5 (docs/attackers-ssl.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from speechbrain.lobes.features import Fbank
from speechbrain.lobes.models.ECAPA_TDNN import (
    AttentiveStatisticsPooling,
    BatchNorm1d,
    Conv1d,
    SERes2NetBlock,
    TDNNBlock,
)
from speechbrain.processing.features import InputNormalization

from ..errors import MissingInputError
from ..seeding import seeded_rng
from .state_dicts import CheckpointError, check_fits, read_torch_file, tensor_mapping
from .wavlm import WavLMLayers, layer_norm_waveforms, load_unilm_wavlm

#: ``ECAPA_TDNN_test()``'s arguments as the toolkit builds it (it never passes any).
CHALLENGE_SIZES = {
    "input_size": 80,
    "lin_neurons": 192,
    "channels": [1024, 1024, 1024, 1024, 3072],
    "kernel_sizes": [5, 3, 3, 3, 1],
    "dilations": [1, 2, 3, 4, 1],
    "attention_channels": 128,
    "res2net_scale": 8,
    "se_channels": 128,
    "global_context": True,
    "groups": [1, 1, 1, 1, 1],
    "dropout": 0.3,
    "ssl_layers": 24,
}
#: The files of the challenge's ``exp/asv_ssl/`` (``01_download_data_model_track1.sh``).
CHALLENGE_CHECKPOINT = "embedding_model.ckpt"
CHALLENGE_WAVLM = "WavLM-Large.pt"
#: The toolkit's parameter-name prefixes -> ours. The rest (``blocks``, ``mfa``, ``asp``, ``asp_bn``,
#: ``fc``) are SpeechBrain's ECAPA_TDNN names, kept.
CHALLENGE_NAMES = (
    ("blocks_features.", "ssl_blocks."),  # the WavLM branch's SE-Res2Net blocks
    ("weighted_sum.layer_weights", "ssl_layer_sum.weights"),  # the 24 layer weights (before softmax)
)
DDP_PREFIX = "module."  # a checkpoint saved from inside DistributedDataParallel
#: ``ssl_input``: what the WavLM branch sees. ``same_window``: the fbank branch's samples (ours);
#: ``file_window``: its own random window of the file, re-read (the toolkit's).
SSL_INPUTS = ("same_window", "file_window")
TOOLKIT_WAVLM_SECONDS = 10.0  # train_ecapa_ssl_tdnn_small.yaml: wavlm_max_length
WAVLM_WINDOW_STREAM = 41  # seeded_rng stream of the file_window crops


def resample_frames(frames: torch.Tensor, length: int) -> torch.Tensor:
    """``(batch, channels, T)`` -> ``(batch, channels, length)`` as the toolkit's ``resample_tensor``.

    More frames than ``length``: consecutive bins averaged, the first ``length - T % length`` of
    ``T // length`` frames, the rest of one frame more. Fewer: the frames repeated cyclically
    (``a b c`` -> ``a b c a b c a``), which is no alignment in time.

    >>> x = torch.arange(5.0).view(1, 1, 5)
    >>> resample_frames(x, 2).tolist()  # bins [0, 1] and [2, 3, 4]
    [[[0.5, 3.0]]]
    >>> resample_frames(x, 7).tolist()
    [[[0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 1.0]]]
    """
    frames_in = frames.shape[-1]
    if frames_in == length:
        return frames
    if frames_in > length:
        base, extra = divmod(frames_in, length)
        split = (length - extra) * base
        head = frames[..., :split].unflatten(-1, (length - extra, base)).mean(-1)
        tail = frames[..., split:].unflatten(-1, (extra, base + 1)).mean(-1)
        return torch.cat([head, tail], dim=-1)
    return frames[..., torch.arange(length, device=frames.device) % frames_in]


class LayerWeightedSum(torch.nn.Module):
    """``(batch, layers, frames, dim)`` -> ``(batch, frames, dim)``: a softmax-weighted sum of the layers.

    >>> layers = torch.stack([torch.zeros(1, 2, 3), torch.ones(1, 2, 3)], dim=1)
    >>> LayerWeightedSum(2)(layers)[0, 0].tolist()  # equal weights at the start
    [0.5, 0.5, 0.5]
    """

    def __init__(self, num_layers: int = 24):
        super().__init__()
        self.weights = torch.nn.Parameter(torch.ones(num_layers))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.weights, dim=0)
        return (layers * weights.view(1, -1, 1, 1)).sum(dim=1)


class EcapaSSL(torch.nn.Module):
    """The embedding model of the challenge's ``ecapa_ssl`` attacker (the toolkit's ``ECAPA_TDNN_test``,
    its arguments and defaults). ``forward(fbank, ssl_layers, lengths=None)``: the toolkit passes no
    ``lengths``, the same when every row is full, as all its training rows are.

    >>> model = EcapaSSL(channels=[16, 16, 16, 16, 48], attention_channels=8, se_channels=8, lin_neurons=6)
    >>> model(torch.rand(2, 30, 80), torch.rand(2, 24, 14, 16)).shape
    torch.Size([2, 1, 6])
    """

    def __init__(
        self,
        input_size: int = 80,
        lin_neurons: int = 192,
        activation=torch.nn.ReLU,
        channels: Sequence[int] = (1024, 1024, 1024, 1024, 3072),
        kernel_sizes: Sequence[int] = (5, 3, 3, 3, 1),
        dilations: Sequence[int] = (1, 2, 3, 4, 1),
        attention_channels: int = 128,
        res2net_scale: int = 8,
        se_channels: int = 128,
        global_context: bool = True,
        groups: Sequence[int] = (1, 1, 1, 1, 1),
        dropout: float = 0.3,
        ssl_layers: int = 24,
    ):
        super().__init__()
        if not len(channels) == len(kernel_sizes) == len(dilations) == len(groups):
            raise ValueError("channels, kernel_sizes, dilations and groups must have one entry per block")
        self.channels = list(channels)

        def se_res2net(i: int, in_channels: int) -> SERes2NetBlock:
            return SERes2NetBlock(
                in_channels,
                channels[i],
                res2net_scale=res2net_scale,
                se_channels=se_channels,
                kernel_size=kernel_sizes[i],
                dilation=dilations[i],
                activation=activation,
                groups=groups[i],
                dropout=dropout,
            )

        inner = range(1, len(channels) - 1)
        first = TDNNBlock(
            input_size, channels[0], kernel_sizes[0], dilations[0], activation, groups[0], dropout
        )
        self.blocks = torch.nn.ModuleList([first] + [se_res2net(i, channels[i - 1]) for i in inner])
        self.ssl_layer_sum = LayerWeightedSum(ssl_layers)
        self.ssl_blocks = torch.nn.ModuleList([se_res2net(i, channels[i]) for i in range(len(channels) - 1)])
        self.mfa = TDNNBlock(
            channels[-2] * (len(channels) - 2),
            channels[-1],
            kernel_sizes[-1],
            dilations[-1],
            activation,
            groups=groups[-1],
            dropout=dropout,
        )
        self.asp = AttentiveStatisticsPooling(
            channels[-1], attention_channels=attention_channels, global_context=global_context
        )
        self.asp_bn = BatchNorm1d(input_size=channels[-1] * 2)
        self.fc = Conv1d(in_channels=channels[-1] * 2, out_channels=lin_neurons, kernel_size=1)

    def forward(self, fbank: torch.Tensor, ssl_layers: torch.Tensor, lengths: torch.Tensor | None = None):
        if (
            ssl_layers.shape[-1] != self.channels[0]
            or ssl_layers.shape[1] != self.ssl_layer_sum.weights.numel()
        ):
            raise ValueError(
                f"WavLM features of shape {tuple(ssl_layers.shape)}: expected (batch, "
                f"{self.ssl_layer_sum.weights.numel()} layers, frames, {self.channels[0]} = channels[0])"
            )
        x = fbank.transpose(1, 2)
        fbank_outputs = []
        for block in self.blocks:
            x = block(x) if isinstance(block, TDNNBlock) else block(x, lengths=lengths)
            fbank_outputs.append(x)
        ssl = self.ssl_layer_sum(ssl_layers).transpose(1, 2)
        ssl_outputs = []
        for block in self.ssl_blocks:
            ssl = block(ssl, lengths=lengths)
            ssl_outputs.append(ssl)
        fused = torch.cat(fbank_outputs[1:], dim=1) * resample_frames(
            torch.cat(ssl_outputs[1:], dim=1), fbank_outputs[-1].shape[-1]
        )
        x = self.asp(self.mfa(fused), lengths=lengths)
        return self.fc(self.asp_bn(x)).transpose(1, 2)


def _renamed(state: Mapping, pairs) -> dict:
    renamed = {}
    for name, value in state.items():
        for old, new in pairs:
            if name.startswith(old):
                name = new + name[len(old) :]
                break
        renamed[name] = value
    return renamed


def from_challenge_state_dict(state: Mapping) -> dict:
    """A toolkit ``ECAPA_TDNN_test`` state dict (``module.`` prefixes of DDP dropped) under our names."""
    state = {name.removeprefix(DDP_PREFIX): value for name, value in state.items()}
    return _renamed(state, CHALLENGE_NAMES)


def to_challenge_state_dict(state: Mapping) -> dict:
    """Our :class:`EcapaSSL` state dict under the toolkit's names (its ``ECAPA_TDNN_test`` loads it strictly)."""
    return _renamed(state, [(new, old) for old, new in CHALLENGE_NAMES])


def read_checkpoint_file(path, *, trusted: bool = False) -> dict:
    """The tensors of an ``embedding_model.ckpt`` (bare or ``{"state_dict": ...}``) under the file's own names."""
    loaded = read_torch_file(path, what="ecapa_ssl embedding model", trusted=trusted)
    if isinstance(loaded, Mapping) and "state_dict" in loaded:
        loaded = loaded["state_dict"]
    return tensor_mapping(loaded, source=path, what="ecapa_ssl embedding model")


def load_challenge_checkpoint(model: EcapaSSL, path, *, trusted: bool = False) -> EcapaSSL:
    """Load ``path`` (the challenge's ``embedding_model.ckpt``, or one of ours) into ``model``, strictly;
    weights that do not fit are refused in one line in the file's own names, before anything is loaded."""
    given = read_checkpoint_file(path, trusted=trusted)
    ours = from_challenge_state_dict(given)
    expected = model.state_dict()
    challenge = any(name.startswith(old) for name in given for old, _ in CHALLENGE_NAMES)
    sizes = f"channels {model.channels}, lin_neurons {model.fc.conv.out_channels}"
    check_fits(
        to_challenge_state_dict(expected) if challenge else expected,
        to_challenge_state_dict(ours) if challenge else ours,
        source=path,
        what=f"the ecapa_ssl embedding model ({sizes})",
        fix=(
            "the challenge's exp/asv_ssl/embedding_model.ckpt fits the default sizes "
            f"(channels {CHALLENGE_SIZES['channels']}, lin_neurons {CHALLENGE_SIZES['lin_neurons']}); "
            "give the model the sizes the file was trained with, or another file"
        ),
    )
    model.load_state_dict(ours, strict=True)
    return model


def wavlm_mismatch(wavlm: WavLMLayers, model: EcapaSSL) -> str | None:
    """Why ``wavlm`` cannot feed ``model`` (its width must be ``channels[0]``, its layers as many), or None."""
    weighted = model.ssl_layer_sum.weights.numel()
    if wavlm.dim == model.channels[0] and wavlm.num_layers == weighted:
        return None
    return (
        f"a WavLM of {wavlm.num_layers} layers of width {wavlm.dim} does not feed an ecapa_ssl model "
        f"weighting {weighted} layers of width channels[0] = {model.channels[0]}"
    )


class EcapaSSLEncoder(torch.nn.Module):
    """The ``ecapa_ssl`` attacker on waveforms: fbank features and WavLM layers of the same samples
    (or WavLM's own ``ssl_wavs``). Only :attr:`embedding_model` learns: checkpoint it alone."""

    def __init__(
        self,
        embedding_model: EcapaSSL,
        wavlm: WavLMLayers,
        compute_features: torch.nn.Module | None = None,
        mean_var_norm: torch.nn.Module | None = None,
    ):
        super().__init__()
        mismatch = wavlm_mismatch(wavlm, embedding_model)
        if mismatch:
            raise ValueError(mismatch)
        self.embedding_model = embedding_model
        self.wavlm = wavlm
        self.compute_features = compute_features if compute_features is not None else Fbank(n_mels=80)
        self.mean_var_norm = (
            mean_var_norm
            if mean_var_norm is not None
            else InputNormalization(norm_type="sentence", std_norm=False)
        )

    def forward(
        self, wavs: torch.Tensor, lengths: torch.Tensor | None = None, ssl_wavs: torch.Tensor | None = None
    ) -> torch.Tensor:
        if lengths is None:
            lengths = torch.ones(wavs.shape[0], device=wavs.device)
        fbank = self.mean_var_norm(self.compute_features(wavs), lengths)
        if ssl_wavs is None:  # same_window: WavLM gets the same samples, normalized if its config says so
            ssl_wavs = layer_norm_waveforms(wavs, lengths) if self.wavlm.normalize else wavs
        layers = self.wavlm(ssl_wavs)
        return self.embedding_model(fbank, layers, lengths)

    def embed_batch(
        self,
        wavs: torch.Tensor,
        lengths: torch.Tensor | None = None,
        *,
        ssl_input: str = "same_window",
        paths: Sequence[str] | None = None,
        keys: Sequence[str] | None = None,
        read: Callable[[str], object] | None = None,
        seed: int = 0,
        epoch: int = 0,
    ) -> torch.Tensor:
        """A training batch's embeddings, WavLM's input chosen by ``ssl_input`` (:data:`SSL_INPUTS`;
        ``file_window`` reads ``paths``, its windows seeded by ``keys``, ``seed`` and ``epoch``)."""
        ssl_wavs = None
        if ssl_input == "file_window":
            if paths is None or keys is None or read is None:
                raise ValueError("ssl_input 'file_window' needs the rows' paths, keys and an audio reader")
            ssl_wavs = file_window_inputs(
                paths, keys, read=read, seed=seed, epoch=epoch, normalize=self.wavlm.normalize
            ).to(wavs.device)
        return self(wavs, lengths, ssl_wavs)


def file_window_inputs(
    paths: Sequence[str],
    keys: Sequence[str],
    *,
    read: Callable[[str], object],
    seed: int,
    epoch: int,
    normalize: bool = True,
    max_seconds: float = TOOLKIT_WAVLM_SECONDS,
    sample_rate: int = 16000,
) -> torch.Tensor:
    """The toolkit's WavLM input (``ssl_input: file_window``, its ``WavLMFeatureExtractor``): each file
    re-read, layer-normalized whole, then a seeded random window of ``max_seconds`` or zeros up to it."""
    size = int(max_seconds * sample_rate)
    rows = []
    for path, key in zip(paths, keys, strict=True):
        audio = torch.as_tensor(read(path), dtype=torch.float32).reshape(-1)
        if normalize:
            audio = layer_norm_waveforms(audio[None])[0]
        if audio.numel() > size:
            start = int(
                seeded_rng(seed, epoch, key, WAVLM_WINDOW_STREAM).integers(0, audio.numel() - size + 1)
            )
            audio = audio[start : start + size]
        rows.append(torch.nn.functional.pad(audio, (0, size - audio.numel())))
    return torch.stack(rows)


def load_challenge_folder(folder, *, wavlm=None, trusted: bool = False, **sizes) -> EcapaSSLEncoder:
    """The ``ecapa_ssl`` attacker of a folder laid out as the challenge's ``exp/asv_ssl/``, on the CPU:
    :class:`EcapaSSL` of ``sizes`` (default :data:`CHALLENGE_SIZES`) and its WavLM (``wavlm``: another path,
    or one already loaded), each file refused in one line if it does not fit."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingInputError(
            f"{folder}: no such folder (the challenge's exp/asv_ssl/, with {CHALLENGE_CHECKPOINT} and {CHALLENGE_WAVLM})"
        )
    unknown = sorted(set(sizes) - set(CHALLENGE_SIZES))
    if unknown:
        raise TypeError(
            f"load_challenge_folder: unknown model sizes {unknown}; known: {sorted(CHALLENGE_SIZES)}"
        )
    model = EcapaSSL(**{**CHALLENGE_SIZES, **sizes})
    load_challenge_checkpoint(model, folder / CHALLENGE_CHECKPOINT, trusted=trusted)
    if not isinstance(wavlm, WavLMLayers):
        wavlm = load_unilm_wavlm(
            Path(wavlm) if wavlm is not None else folder / CHALLENGE_WAVLM, trusted=trusted
        )
    mismatch = wavlm_mismatch(wavlm, model)
    if mismatch:
        raise CheckpointError(f"{folder}: {mismatch}; its two files do not belong together")
    return EcapaSSLEncoder(model, wavlm).eval()


_WAVLMS: dict[tuple, WavLMLayers] = {}


def wavlm_for(
    embedding_model: EcapaSSL, wavlm_checkpoint, *, trusted: bool = False, wavlm=None
) -> WavLMLayers:
    """The WavLM that feeds ``embedding_model``: ``wavlm``, else that of ``wavlm_checkpoint``, loaded once
    per process for the same file (the training's hook and export model name the same 1.2 GB file);
    one whose width or layer count does not fit is refused in one line naming ``wavlm_checkpoint``."""
    if wavlm is None:
        path = Path(wavlm_checkpoint)
        if not path.is_file():
            raise MissingInputError(
                f"wavlm_checkpoint: {path} is not a file (the challenge's exp/asv_ssl/{CHALLENGE_WAVLM}, unilm's format)"
            )
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, bool(trusted))
        if key not in _WAVLMS:
            _WAVLMS[key] = load_unilm_wavlm(path, trusted=trusted)
        wavlm = _WAVLMS[key]
    mismatch = wavlm_mismatch(wavlm, embedding_model)
    if mismatch:
        raise CheckpointError(f"wavlm_checkpoint: {wavlm_checkpoint}: {mismatch}")
    return wavlm


class WaveformPassThrough(torch.nn.Module):
    """``compute_features`` / ``mean_var_norm`` of a model on waveforms: the input passes unchanged.

    SpeechBrain's ``EncoderClassifier.encode_batch`` calls ``embedding_model(mean_var_norm(
    compute_features(wavs), lens), lens)``; with these, :class:`EcapaSSLOnWaves` gets the waveforms.

    >>> WaveformPassThrough()(torch.ones(1, 3), torch.ones(1)).tolist()
    [[1.0, 1.0, 1.0]]
    """

    def forward(self, wavs: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return wavs

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        # An export's mean_var_norm.ckpt is the training normalizer's statistics (sentence
        # normalization keeps none that matter): nothing of it belongs to a pass-through.
        return torch.nn.modules.module._IncompatibleKeys([], [])


class EcapaSSLOnWaves(EcapaSSL):
    """:class:`EcapaSSL` on waveforms: the model an export's (and a challenge folder's) ``embedding_model`` is.

    Its state dict is :class:`EcapaSSL`'s; the WavLM, Fbank and normalization are held outside the
    module tree, so they are neither saved, nor moved by ``.to()`` (at the first forward instead), nor trained.
    """

    def __init__(self, wavlm_checkpoint, *, trusted: bool = False, wavlm: WavLMLayers | None = None, **sizes):
        super().__init__(**sizes)
        wavlm = wavlm_for(self, wavlm_checkpoint, trusted=trusted, wavlm=wavlm)
        front = (
            wavlm,
            Fbank(n_mels=self.blocks[0].conv.conv.in_channels),
            InputNormalization(norm_type="sentence", std_norm=False),
        )
        object.__setattr__(self, "_front", front)  # not submodules: not in the state dict

    @property
    def wavlm(self) -> WavLMLayers:
        return self._front[0]

    def forward(self, wavs: torch.Tensor, lengths: torch.Tensor | None = None, ssl_wavs=None):
        if wavs.dim() == 3:  # (batch, frames, features) would be an fbank: this model takes waveforms
            raise ValueError("EcapaSSLOnWaves takes waveforms (batch, samples), not features")
        wavlm, fbank, norm = self._front
        if next(wavlm.parameters()).device != wavs.device:
            wavlm.to(wavs.device)
            fbank.to(wavs.device)
        if lengths is None:
            lengths = torch.ones(wavs.shape[0], device=wavs.device)
        features = norm(fbank(wavs), lengths)
        ssl = layer_norm_waveforms(wavs, lengths) if wavlm.normalize else wavs
        return super().forward(features, wavlm(ssl if ssl_wavs is None else ssl_wavs), lengths)

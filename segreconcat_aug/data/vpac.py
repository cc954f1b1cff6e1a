"""Where a challenge system's data folders are, in the two layouts the challenges ship (VPAC 2024's
``<root>/<SYS>/data/<set>_<SYS>/``, the VPC 2026 toolkit's ``<root>/data/<set><suffix>`` beside the
original ``data/<set>``), with the YAML's ``folder_overrides`` (docs/data.md).

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "B4" / "data" / "libri360_anon_B4").mkdir(parents=True)
>>> folders = system_folders(root, "B4", {"B4": {"train-clean-360": "libri360_anon_B4"}}, sets=["train-clean-360"])
>>> folders["train-clean-360"].name
'libri360_anon_B4'
>>> (root / "data" / "train-clean-360_B3").mkdir(parents=True)
>>> system_folders(root, "B3", sets=["train-clean-360"], layout="vpc2026")["train-clean-360"].relative_to(root).as_posix()
'data/train-clean-360_B3'
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import NamedTuple

from segreconcat_aug.data.kaldi import KaldiFolder, KaldiFormatError, PipeCommand, load_kaldi_folder
from segreconcat_aug.data.protocols import LAYOUTS, get_protocol
from segreconcat_aug.errors import MissingInputError, UserError

logger = logging.getLogger(__name__)

VPAC_SYSTEMS = ("B3", "B4", "B5", "T8-5", "T10-2", "T12-5", "T25-1")
VPAC_SETS = get_protocol("vpac2024").sets()


class VPACLayoutError(UserError, FileNotFoundError):
    """A system or one of its folders is not where the configuration says."""


def detect_layout(data_folder, system: str, preferred: str = "vpac2024") -> str:
    """The layout ``data_folder`` holds ``system``'s data in: ``preferred`` when it does, else the other
    one; when neither, ``preferred`` (its error names what is missing).

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "data").mkdir()
    >>> detect_layout(root, "B3"), detect_layout(root, "B3", preferred="vpc2026")
    ('vpc2026', 'vpc2026')
    """
    if preferred not in LAYOUTS:
        raise ValueError(f"unknown layout {preferred!r}; layouts: {LAYOUTS}")
    root = Path(data_folder)
    present = {"vpac2024": (root / system / "data").is_dir(), "vpc2026": (root / "data").is_dir()}
    if present[preferred]:
        return preferred
    other = next(layout for layout in LAYOUTS if layout != preferred)
    return other if present[other] else preferred


def layout_overrides(overrides: dict | None, system: str, layout: str) -> dict:
    """The folder overrides of ``system`` in ``layout``: its plain entries, then its layout-scoped ones."""
    overrides = overrides or {}
    mapping = dict(overrides.get(system) or {})
    mapping.update((overrides.get(layout) or {}).get(system) or {})
    return mapping


def _missing_system(root: Path, system: str, layout: str) -> VPACLayoutError:
    if layout == "vpac2024":
        present = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        return VPACLayoutError(
            f"system {system!r} not found: no folder {root / system / 'data'} "
            f"(systems present under {root}: {present or 'none'}; challenge systems: {list(VPAC_SYSTEMS)})"
        )
    return VPACLayoutError(
        f"no folder {root / 'data'}: --data_folder must be the VPC 2026 toolkit's root (the folder holding "
        f"data/<set>_{system}/), or a VPAC 2024 root holding {system}/data/"
    )


def present_suffixes(data_folder, set_name: str) -> list[str]:
    """The system suffixes (without their underscore) of ``<root>/data/<set_name>_*`` folders (2026 layout)."""
    data = Path(data_folder) / "data"
    if not data.is_dir():
        return []
    prefix = f"{set_name}_"
    return sorted(p.name[len(prefix) :] for p in data.iterdir() if p.is_dir() and p.name.startswith(prefix))


def system_folders(
    data_folder,
    system: str,
    overrides: dict | None = None,
    sets=VPAC_SETS,
    *,
    layout: str | None = "vpac2024",
    known_sets=None,
) -> dict[str, Path]:
    """The folder of each set of ``system``, checked to exist."""
    layout = detect_layout(data_folder, system) if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; layouts: {LAYOUTS}")
    root = Path(data_folder)
    data = root / system / "data" if layout == "vpac2024" else root / "data"
    if not data.is_dir():
        raise _missing_system(root, system, layout)
    mapping = layout_overrides(overrides, system, layout)
    known = list(dict.fromkeys([*(known_sets or VPAC_SETS), *sets]))
    unknown = set(mapping) - set(known)
    if unknown:
        raise VPACLayoutError(
            f"folder_overrides for {system}: unknown set(s) {sorted(unknown)}; sets: {known}"
        )
    folders = {}
    for set_name in sets:
        name = mapping.get(set_name, f"{set_name}_{system}")
        folder = Path(name) if Path(name).is_absolute() else data / name
        if not folder.is_dir():
            hint = ""
            if layout == "vpc2026" and set_name not in mapping:
                found = present_suffixes(root, set_name)
                hint = f" (suffixes present for {set_name}: {found or 'none'}; --system names the suffix)"
            raise VPACLayoutError(
                f"system {system}: folder for {set_name!r} not found at {folder}{hint}; "
                f"set folder_overrides: {{{system}: {{{set_name}: <folder name>}}}} if it has another name"
            )
        folders[set_name] = folder
    return folders


def original_folder(data_folder, set_name: str, layout: str) -> Path | None:
    """The original (not anonymized) folder of a set, where the layout has one: ``<root>/data/<set>`` (2026)."""
    return Path(data_folder) / "data" / set_name if layout == "vpc2026" else None


def sibling_original(folder) -> Path | None:
    """The original beside an anonymized 2026 folder given by its path alone (``data/<set>_<SYS>`` ->
    ``data/<set>``, the longest such sibling holding a ``wav.scp``), or None.

    >>> import tempfile, pathlib
    >>> data = pathlib.Path(tempfile.mkdtemp())
    >>> (data / "train-clean-360").mkdir(); _ = (data / "train-clean-360" / "wav.scp").write_text("u a.wav\\n")
    >>> sibling_original(data / "train-clean-360_B4_v2").name, sibling_original(data / "train-clean-360")
    ('train-clean-360', None)
    """
    folder = Path(folder)
    name = folder.name
    while "_" in name:
        name = name.rsplit("_", 1)[0]
        if (folder.parent / name / "wav.scp").is_file():
            return folder.parent / name
    return None


def log_completion(folder: KaldiFolder) -> None:
    """Say what a folder lacked and was read from its original (``KaldiFolder.completed``)."""
    if folder.completed:
        logger.info(
            "%s completed as the VPC 2026 toolkit completes it, in memory (nothing written): %s",
            folder.path,
            "; ".join(f"{name} from {where}" for name, where in folder.completed.items()),
        )


def load_set_folder(folder, data_folder, set_name: str, layout: str, **options) -> KaldiFolder:
    """A set's folder read with :func:`~segreconcat_aug.data.kaldi.load_kaldi_folder` (``options``: its
    keywords), completed from the set's original in the 2026 layout (logged; nothing is written)."""
    folder = Path(folder)
    original = original_folder(data_folder, set_name, layout)
    if original is not None and (not original.is_dir() or original.resolve() == folder.resolve()):
        original = None
    loaded = load_kaldi_folder(folder, root=data_folder, original=original, **options)
    log_completion(loaded)
    return loaded


def training_folder(
    data_folder, system: str, overrides: dict | None = None, protocol=None, language=None
) -> Path:
    """The training set's folder of ``system`` under a protocol, in the layout the data folder holds
    (the protocol's own first)."""
    scheme = get_protocol(protocol)
    name = scheme.train_set(language)
    layout = detect_layout(data_folder, system, scheme.layout)
    try:
        return system_folders(
            data_folder, system, overrides, sets=[name], layout=layout, known_sets=scheme.known_sets()
        )[name]
    except VPACLayoutError as err:
        if language and scheme.languages and not scheme.languages[language].shipped_train_set:
            raise VPACLayoutError(
                f"{err} (the VPC 2026 toolkit ships no training set for {language}: name one with "
                f"folder_overrides: {{{system}: {{{name}: <folder>}}}})"
            ) from None
        raise


class JobItem(NamedTuple):
    """One utterance to process: its id, audio source, transcript (or None), and why it is refused (or None)."""

    id: str
    source: str
    text: str | None = None
    problem: str | None = None


def read_inputs(
    source, *, allow_pipes: bool = False, root=None, replacements: dict | None = None
) -> list[JobItem]:
    """Utterances of a Kaldi folder or a SpeechBrain CSV manifest (columns ``ID``, ``wav``, optional ``text``
    or ``wrd``; ``$name`` in ``wav`` replaced by ``replacements[name]``)."""
    source = Path(source)
    if source.is_dir():
        # A VPC 2026 anonymized folder holding only its audio: the lists from its original beside it.
        original = None if (source / "wav.scp").is_file() else sibling_original(source)
        folder = load_kaldi_folder(
            source, root=root, allow_pipes=True, require_utt2spk=False, original=original
        )
        log_completion(folder)
        texts = folder.text or {}
        items = []
        for utt, wav in folder.wav.items():
            problem = None
            if isinstance(wav, PipeCommand) and not allow_pipes:
                problem = f"{source / 'wav.scp'}: entry is a shell pipe ({wav} |); refused unless allow_pipes is enabled"
            items.append(JobItem(utt, wav, texts.get(utt), problem))
        return items
    if not source.is_file():
        raise MissingInputError(f"{source}: neither a Kaldi data folder nor a CSV manifest")
    items, seen = [], {}
    with open(source, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not {"ID", "wav"} <= set(reader.fieldnames or []):
            raise KaldiFormatError(
                f"{source}: CSV manifest needs columns ID and wav, has {reader.fieldnames or []}"
            )
        for number, row in enumerate(reader, start=2):
            utt, wav = (row.get("ID") or "").strip(), (row.get("wav") or "").strip()
            if not utt or not wav:
                raise KaldiFormatError(f"{source}:{number}: empty ID or wav")
            if utt in seen:
                raise KaldiFormatError(f"{source}:{number}: ID {utt!r} already on line {seen[utt]}")
            seen[utt] = number
            for name, value in (replacements or {}).items():
                wav = wav.replace(f"${name}", str(value))
            path = Path(wav)
            if not path.is_absolute():
                candidates = ([Path(root) / path] if root is not None else []) + [source.parent / path]
                path = next((c for c in candidates if c.exists()), candidates[0])
            text = row.get("text")
            items.append(JobItem(utt, str(path), row.get("wrd") if text is None else text))
    if not items:
        raise KaldiFormatError(f"{source}: no rows after the header: an empty manifest lists nothing to do")
    return items

#!/usr/bin/env python3
"""Word alignments of a data folder into the alignment cache (see docs/alignment.md).

Default backend: faster-whisper with Whisper-medium (openai-whisper's word timing, batched);
``--backend=openai-whisper`` is the authors' own tool, ``--backend=transformers`` the
transformers one, ``--backend=pocketsphinx`` forced alignment to the transcript.

Usage::

    python recipes/align.py hparams/align.yaml --data_folder=<folder> --output=<x.jsonl>
    python recipes/align.py hparams/align.yaml --data_folder=<folder> --output=<x.jsonl> --shard=0/4
    python recipes/align.py hparams/align.yaml --data_folder=<folder> --output=<x.jsonl> --launcher=slurm --shards=8
    torchrun --standalone --nproc_per_node=8 recipes/align.py hparams/align.yaml --data_folder=... --output=<dir>
    python recipes/align.py hparams/align.yaml --output=<x.jsonl> --merge=True [--data_folder=<folder>]
    python recipes/align.py hparams/align.yaml --backend=mfa --import_from=<TextGrids> --output=<x.jsonl>

Reruns skip what is done; failed utterances go to ``<part>.failures.tsv`` and make the exit
status 1 unless ``--allow_failures=True``. ``--launcher=slurm --shards=N`` runs the N shards as a SLURM
job array (resources: the ``slurm_*`` keys), waits for it, then merges them into ``--output`` (or
``merge_output``), as ``--merge=True`` does.

Language: Whisper detects it per utterance (``language: null``, the default) and the cache records
it per utterance; ``--language=de`` forces one (VPC 2026 Track 2 codes: ``cn`` is Whisper's ``zh``).
pocketsphinx aligns English only: it refuses a set whose language (``--language``, or a VPC 2026
Track 2 folder's name such as ``train_german_<SYS>``) is another.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from segreconcat_aug.align.aligners import ALIASES, BACKENDS, make_aligner
from segreconcat_aug.align.aligners.importers import import_ctm, import_textgrids
from segreconcat_aug.align.cache import UtteranceAlignment, load_alignments
from segreconcat_aug.align.whisper import DEFAULT_MODELS, check_model_folder
from segreconcat_aug.cli import load_recipe_hparams, run_main
from segreconcat_aug.data.audio import SAMPLE_RATE, AudioReadError, audio_duration
from segreconcat_aug.data.jobs import (
    ItemError,
    Job,
    JobError,
    array_shards,
    merge_jsonl,
    read_failures,
    read_inputs,
    read_item_audio,
    resolve_shard,
    run_array,
    task_arguments,
)
from segreconcat_aug.data.jsonl_files import shard_files
from segreconcat_aug.data.kaldi import PipeCommand, read_kaldi_map
from segreconcat_aug.data.protocols import language_of_set, whisper_language
from segreconcat_aug.errors import OptionError, UserError

logger = logging.getLogger("align")
IMPORTERS = ("mfa", "ctm")


class AlignLanguageError(UserError, ValueError):
    """The backend or model cannot align the language of the data."""


def data_language(hparams: dict) -> str | None:
    """The language of the data: ``--language``, else a VPC 2026 Track 2 set's (its folder name), else None."""
    if hparams["language"]:
        return hparams["language"]
    return language_of_set(Path(hparams["data_folder"]).name) if hparams["data_folder"] else None


def check_language(hparams: dict, backend: str) -> None:
    """Refuse, before anything is written, a backend or model that cannot align the data's language."""
    language = data_language(hparams)
    if language in (None, "en"):
        return
    where = "--language" if hparams["language"] else f"the folder name {Path(hparams['data_folder']).name}"
    if backend == "pocketsphinx":
        raise AlignLanguageError(
            f"pocketsphinx aligns English only (its model is en-us) and {where} says this set is in "
            f"{language!r}: use Whisper (--backend=faster-whisper, language detected per utterance)"
        )
    model = str(hparams["whisper_model"] or "")
    if backend in DEFAULT_MODELS and model.endswith(".en"):
        raise AlignLanguageError(
            f"{model} is an English-only Whisper and {where} says this set is in {language!r}: use a "
            "multilingual model (--whisper_model=medium, the paper's)"
        )


def build_aligner(hparams: dict, device: str | None):
    """The aligner named by ``backend`` with its YAML options."""
    backend = ALIASES.get(hparams["backend"], hparams["backend"])
    if backend == "pocketsphinx":
        return make_aligner(
            "pocketsphinx",
            oov=hparams["oov"],
            recognize_without_transcript=hparams["recognize_without_transcript"],
            wide_beam_retry=hparams["wide_beam_retry"],
        )
    model = hparams["whisper_model"] or DEFAULT_MODELS[backend]
    options = hparams["transcribe_options"] or {}
    if backend == "faster-whisper":
        return make_aligner(
            backend,
            model=model,
            device=device,
            compute_type=hparams["compute_type"],
            batch_size=hparams["batch_size"],
            language=whisper_language(hparams["language"]),
            max_new_tokens=hparams["max_new_tokens"],
            num_beams=hparams["num_beams"],
            options=options,
        )
    if backend == "openai-whisper":
        return make_aligner(
            backend,
            model=model,
            device=device,
            language=whisper_language(hparams["language"]),
            options=options,
        )
    transformers_options = dict(
        batch_size=hparams["batch_size"],
        language=whisper_language(hparams["language"]),  # None: detected per utterance
        max_new_tokens=hparams["max_new_tokens"],
        num_beams=hparams["num_beams"],
    )
    if model == "tiny-random-whisper":
        from segreconcat_aug.testing import tiny_whisper

        logger.warning("tiny-random-whisper has random weights: its words are meaningless (tests only)")
        return make_aligner(backend, bundle=tiny_whisper(device=device or "cpu"), **transformers_options)
    return make_aligner(backend, model=model, device=device, dtype=hparams["dtype"], **transformers_options)


def checked_inputs(hparams: dict) -> list:
    """The utterances to align, after the checks that stop a run before anything is written."""
    if not hparams["data_folder"]:
        raise OptionError("--data_folder=<Kaldi folder or CSV manifest> is required: the utterances to align")
    backend = ALIASES.get(hparams["backend"], hparams["backend"])
    if backend in DEFAULT_MODELS and hparams["whisper_model"] not in (None, "tiny-random-whisper"):
        # A wrong model folder stops the run before anything is written (a WhisperLoadError: one line).
        check_model_folder(hparams["whisper_model"], backend)
    check_language(hparams, backend)
    return read_inputs(hparams["data_folder"], allow_pipes=hparams["allow_pipes"], root=hparams["data_root"])


def align_array(hparams: dict, shards: int, argv) -> int:
    """``--launcher=slurm``: this command's shards as one SLURM job array, then their merge."""
    items = checked_inputs(hparams)
    command = [sys.executable, str(Path(__file__).resolve()), *task_arguments(argv)]
    ids = [item.id for item in items]
    status = run_array(command, hparams["output"], ids, shards=shards, hparams=hparams, name="align")
    return max(status, merge(hparams))


def align(hparams: dict, device: str | None) -> int:
    """Align every pending utterance of this shard; returns the exit status."""
    items = checked_inputs(hparams)
    shard = resolve_shard(hparams["shard"])
    with Job(
        hparams["output"],
        shard=shard,
        desc=f"align {hparams['backend']}",
        progress=hparams["progress"],
        fsync=hparams["fsync"],
    ) as job:
        todo = job.pending(items)
        aligner = build_aligner(hparams, device) if todo else None  # no model load when all is done
        batch_size = aligner.batch_size if aligner else 1
        for batch in job.track(todo, batch_size=batch_size):
            ready, audios, texts = [], [], []
            for item in batch:
                if aligner.needs_transcript and not (item.text or "").strip():
                    job.fail(item.id, "no transcript (text) for this utterance", kind="no_transcript")
                    continue
                try:
                    audios.append(read_item_audio(item, resample=hparams["resample"]))
                except ItemError as err:
                    job.fail(item.id, err)
                    continue
                ready.append(item)
                texts.append(item.text)
            if not ready:
                continue
            results = aligner.align_batch(audios, texts)
            # The language each utterance was transcribed in (Whisper: detected, or the one forced).
            languages = getattr(aligner, "languages", None) or [getattr(aligner, "language", None)] * len(
                ready
            )
            for item, audio, result, language in zip(ready, audios, results, languages):
                if isinstance(result, Exception):
                    job.fail(item.id, result, kind="alignment_failed")
                    continue
                record = UtteranceAlignment(item.id, len(audio) / SAMPLE_RATE, result, aligner.name, language)
                job.write(item.id, record.to_json())
    logger.info(job.summary())
    if aligner is not None and aligner.stats:
        logger.info("%s: %s", aligner.name, dict(sorted(aligner.stats.items())))
    return job.exit_status(hparams["allow_failures"])


def folder_durations(hparams: dict) -> tuple[dict | None, list | None]:
    """``(durations, ids)`` of the data folder for importers (``utt2dur`` or audio headers)."""
    if not hparams["data_folder"]:
        return None, None
    items = read_inputs(hparams["data_folder"], allow_pipes=True, root=hparams["data_root"])
    utt2dur = Path(hparams["data_folder"]) / "utt2dur"
    durations = {utt: float(v) for utt, v in read_kaldi_map(utt2dur).items()} if utt2dur.is_file() else {}
    for item in items:
        if item.id not in durations and not isinstance(item.source, PipeCommand):
            try:
                durations[item.id] = audio_duration(item.source)
            except AudioReadError as err:
                logger.warning("no duration for %s: %s", item.id, err)
    return durations, [item.id for item in items]


def run_import(hparams: dict) -> int:
    if not hparams["import_from"]:
        raise OptionError(f"--backend={hparams['backend']} needs --import_from=<path> (the files to import)")
    durations, ids = folder_durations(hparams)
    options = dict(
        durations=durations, ids=ids, shard=resolve_shard(hparams["shard"]), progress=hparams["progress"]
    )
    if hparams["backend"] == "mfa":
        job, stats = import_textgrids(
            hparams["import_from"], hparams["output"], tier=hparams["textgrid_tier"], **options
        )
    else:
        job, stats = import_ctm(hparams["import_from"], hparams["output"], **options)
    logger.info(job.summary())
    if stats:
        logger.info("word fixes: %s", dict(sorted(stats.items())))
    return job.exit_status(hparams["allow_failures"])


def merge(hparams: dict) -> int:
    """Parts of ``output`` -> one file, with its binary index; with ``data_folder``, every utterance must be there.

    What the file held before (a merge or a one-process run) stays in it.
    """
    output = Path(hparams["output"])
    target = Path(hparams["merge_output"] or (output if output.suffix == ".jsonl" else f"{output}.jsonl"))
    expected = None
    failures = read_failures(output)
    if hparams["data_folder"]:
        ids = [
            item.id
            for item in read_inputs(hparams["data_folder"], allow_pipes=True, root=hparams["data_root"])
        ]
        # Failed utterances are known to be missing; allow_failures accepts that.
        expected = [utt for utt in ids if not (hparams["allow_failures"] and utt in failures)]
    try:
        previous = [target] if target.is_file() else []  # what the file held before stays in it
        report = merge_jsonl([*previous, *shard_files(output)], target, expected_ids=expected)
    except JobError as err:
        logger.error("merge refused: %s", err)
        return 1
    load_alignments(target)  # checks every record and writes the binary index training loads
    logger.info("merged %d utterances from %d part(s) into %s", report.lines, len(report.per_file), target)
    if failures:
        logger.warning("%d utterance(s) failed in the shards (see *.failures.tsv)", len(failures))
    return 0


def main(argv=None) -> int:
    hparams_file, run_opts, overrides, hparams = load_recipe_hparams(argv)
    if run_opts.get("noprogressbar"):
        hparams["progress"] = False
    # SpeechBrain's own --device wins over the YAML key when given.
    device = run_opts.get("device") or hparams["device"]
    backend = hparams["backend"]
    shards = array_shards(hparams)
    if hparams["merge"]:
        return merge(hparams)
    if backend in IMPORTERS:
        if shards:
            raise OptionError(f"--backend={backend} imports files here (quickly): drop --launcher=slurm")
        return run_import(hparams)
    if backend not in BACKENDS and backend not in ALIASES:
        raise OptionError(f"--backend={backend!r}: expected one of {', '.join(BACKENDS + IMPORTERS)}")
    if shards:
        return align_array(hparams, shards, sys.argv[1:] if argv is None else argv)
    return align(hparams, device)


if __name__ == "__main__":
    run_main(main)

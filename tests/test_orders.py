"""The order cache (segreconcat_aug.method.orders), computing it (method.order_computer, recipes/compute_orders.py),
and SegReConcat reading AR/SR orders."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hyperpyyaml import load_hyperpyyaml

from segreconcat_aug.align.cache import AlignmentIndex, load_alignments
from segreconcat_aug.data import jobs
from segreconcat_aug.data.audio import read_audio, write_audio
from segreconcat_aug.data.jobs import JobError, Shard, merge_jsonl, read_failures, resolve_shard, shard_path
from segreconcat_aug.data.jsonl_files import shard_files
from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.data.vpac import JobItem, read_inputs
from segreconcat_aug.errors import UserError
from segreconcat_aug.method.augment import MissingAlignmentError, SegReConcat
from segreconcat_aug.method.order_computer import OrderComputer, run_order_job
from segreconcat_aug.method.orders import OrderCacheError, StaleOrderError, load_orders, order_record
from segreconcat_aug.method.segments import word_segments
from segreconcat_aug.method.similarity import semantic_order
from segreconcat_aug.training.augmenter import build_augmenter

REPO = Path(__file__).resolve().parents[1]
SUBSET = ["19-198-0001", "26-495-0019", "27-123349-0009", "2414-128291-0000", "3331-159605-0004"]


@pytest.fixture(scope="module")
def train(vpac_root):
    """(items, alignments) of the B3 training folder: real LibriSpeech audio, uniform word times."""
    folder = vpac_root / "B3" / "data" / "train-clean-360_B3"
    items = [JobItem(item.id, str(item.source), item.text) for item in read_inputs(folder, root=vpac_root)]
    return items, load_alignments(vpac_root / "alignments" / "B3.jsonl")


def subset(items):
    return [item for item in items if item.id in SUBSET]


def expected_output(audio, segments, order):
    """SegReConcat with no crossfade: the original, then the segments in the order."""
    return np.concatenate([audio] + [audio[a:b] for a, b in segments.spans[order]])


def check_augmenter(strategy, items, alignments, orders):
    # SR's peak normalization is tested in test_augment; here: the order is what is applied.
    augmenter = SegReConcat(alignments, strategy=strategy, orders=orders, sr_pad_normalize=False)
    augmenter.check_coverage([item.id for item in items])
    for item in items:
        audio = read_audio(item.source)
        out = augmenter(audio, item.id, epoch=3)
        segments = augmenter.segments(item.id, len(audio))
        order = orders[item.id]
        assert sorted(order.tolist()) == list(range(len(segments)))
        assert np.array_equal(out, expected_output(audio, segments, order))
        # The order is fixed: another epoch gives the same output.
        assert np.array_equal(augmenter(audio, item.id, epoch=4), out)
        assert augmenter.plan(audio, item.id, epoch=4)[1] == "augmented"


# --------------------------------------------------------------------------- AR end to end


def test_acoustic_orders_drive_the_augmenter(train, tmp_path):
    items, alignments = train
    items = subset(items)
    computer = OrderComputer("acoustic", alignments)
    output = tmp_path / "orders.jsonl"
    job = run_order_job(computer, items, output, progress=False)
    assert job.written == len(items) and job.failed == 0
    orders = load_orders(output, strategy="acoustic", alignments=alignments, segment_policy="authors")
    assert sorted(orders) == sorted(SUBSET)
    # The cache holds what the strategy computes (deterministic), not something else.
    for item in items:
        assert orders[item.id].tolist() == computer.order(item.id, read_audio(item.source)).tolist()
    # Similarity orders differ from the original order on real speech.
    assert any(order.tolist() != sorted(order.tolist()) for order in orders.values())
    check_augmenter("acoustic", items, alignments, orders)


def test_rerun_skips_done_utterances_and_refuses_other_settings(train, tmp_path):
    items, alignments = train
    items = subset(items)
    output = tmp_path / "orders.jsonl"
    run_order_job(OrderComputer("acoustic", alignments), items[:2], output, progress=False)
    again = run_order_job(OrderComputer("acoustic", alignments), items, output, progress=False)
    assert again.written == len(items) - 2 and again.previously_done == 2
    lines = output.read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(SUBSET)
    other = OrderComputer("acoustic", alignments, options={"fixed_frames": 100})
    with pytest.raises(JobError, match="5 cached order"):
        run_order_job(other, items, output, progress=False)
    with pytest.raises(JobError, match="other alignments, segmentation"):
        run_order_job(
            OrderComputer("acoustic", alignments, segment_policy="words"), items, output, progress=False
        )


def test_missing_order_follows_the_missing_alignment_policy(train, tmp_path):
    items, alignments = train
    items = subset(items)[:2]
    output = tmp_path / "orders.jsonl"
    run_order_job(OrderComputer("acoustic", alignments), items[:1], output, progress=False)
    orders = load_orders(output, strategy="acoustic", alignments=alignments, segment_policy="authors")
    audio = read_audio(items[1].source)
    strict = SegReConcat(alignments, strategy="acoustic", orders=orders)
    with pytest.raises(MissingAlignmentError, match="acoustic order"):
        strict.check_coverage([item.id for item in items])
    with pytest.raises(MissingAlignmentError, match=items[1].id):
        strict(audio, items[1].id, epoch=1)
    lenient = SegReConcat(alignments, strategy="acoustic", orders=orders, missing_alignment="passthrough")
    assert np.array_equal(lenient(audio, items[1].id, epoch=1), audio)
    assert lenient.plan(audio, items[1].id, epoch=1) == (None, "missing_order")


# --------------------------------------------------------------------------- SR end to end


def test_semantic_orders_with_a_tiny_whisper(train, tmp_path):
    from segreconcat_aug.testing import tiny_whisper

    items, alignments = train
    # The shortest three: each word is one 30 s encoder window, the slow part on a CPU.
    items = [item for item in items if item.id in ("26-495-0019", "2414-128291-0000", "3331-159605-0004")]
    bundle = tiny_whisper()
    computer = OrderComputer("semantic", alignments, whisper=bundle, encoder_batch_size=3)
    output = tmp_path / "semantic.jsonl"
    job = run_order_job(computer, items, output, batch_size=2, progress=False)
    assert job.written == len(items) and job.failed == 0
    orders = load_orders(
        output,
        strategy="semantic",
        alignments=alignments,
        segment_policy="authors",
        required_options={"context": "segment"},
    )
    record = json.loads(output.read_text().splitlines()[0])
    assert record["options"]["whisper_model"] == "tiny-random-whisper"
    assert record["options"]["context"] == "segment"  # the default, always written (part of the key)
    # Batched encoder passes give the orders of one utterance at a time.
    for item in items:
        audio = read_audio(item.source)
        segments = computer.segments(item.id, len(audio))
        alone = semantic_order(segments, audio, None, sample_rate=16000, whisper=bundle)
        assert orders[item.id].tolist() == alone.tolist()
        # The segments' peak, stored for sr_pad_normalize: the largest |sample| of the word spans.
        expected = max(float(np.abs(audio[a:b]).max()) for a, b in segments.spans)
        assert orders.peaks[item.id] == expected and 0 < expected <= np.abs(audio).max()
    check_augmenter("semantic", items, alignments, orders)
    # A cache without the peaks (written before they were stored) is not resumed into.
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    old = tmp_path / "old-semantic.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "peak"}) + "\n" for r in lines))
    with pytest.raises(JobError, match="hold no SR peak"):
        run_order_job(computer, items, old, progress=False)
    # Training asking for another SR context refuses these orders, naming the option.
    with pytest.raises(
        StaleOrderError, match=r"semantic.jsonl:1: .*option context='segment'.*not 'utterance'"
    ):
        load_orders(
            output,
            strategy="semantic",
            alignments=alignments,
            segment_policy="cover",
            required_options={"context": "utterance"},
        )
    # ... and a computer with another context refuses to resume into this cache.
    other = OrderComputer("semantic", alignments, whisper=bundle, options={"context": "utterance"})
    with pytest.raises(JobError, match="other alignments, segmentation or options"):
        run_order_job(other, items, output, progress=False)
    with pytest.raises(ValueError, match="sr_context: unknown 'word'"):
        OrderComputer("semantic", alignments, whisper=bundle, options={"context": "word"})
    # The acoustic strategy must not read semantic orders.
    with pytest.raises(StaleOrderError, match="has a 'semantic' order"):
        load_orders(output, strategy="acoustic", alignments=alignments, segment_policy="cover")


# --------------------------------------------------------------------------- cache validation


def small_index(shift=0.0, duration=2.0):
    return AlignmentIndex(
        ["a", "b"],
        [duration, 1.0],
        [0, 3, 5],
        [0.2 + shift, 0.7, 1.2, 0.0, 0.5],
        [0.7, 1.2, 1.9, 0.5, 1.0],
        ["t"] * 2,
    )


def write_cache(path, alignments, orders=None, **settings):
    settings = {"strategy": "acoustic", "options": {"n_mfcc": 13}, "segment_policy": "cover", **settings}
    orders = orders or {"a": [0, 3, 1, 2], "b": [1, 0]}
    lines = [order_record(utt, order, alignments=alignments, **settings) for utt, order in orders.items()]
    path.write_text("".join(line + "\n" for line in lines))
    return path


LOAD = {"strategy": "acoustic", "segment_policy": "cover"}


def test_valid_cache_loads(tmp_path):
    path = write_cache(tmp_path / "o.jsonl", small_index())
    orders = load_orders(path, alignments=small_index(), **LOAD)
    assert {k: v.tolist() for k, v in orders.items()} == {"a": [0, 3, 1, 2], "b": [1, 0]}
    assert orders["a"].dtype == np.int64
    assert load_orders(path, alignments=small_index(), options={"n_mfcc": 13}, **LOAD).keys() == orders.keys()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"alignments": small_index(shift=0.05)}, r"o.jsonl:1: the acoustic order of utterance 'a' is stale"),
        ({"alignments": small_index(duration=2.5)}, r"utterance 'a' is stale"),
        (
            {"segment_policy": "words"},
            r"utterance 'a' is stale \(segments cut by 'cover' \(segment_policy='cover'\), now by 'words'",
        ),
        # The default changed from cover to the authors' cut (for AR: onsets): detected, named.
        ({"segment_policy": "authors"}, r"cut by 'cover' \(segment_policy='cover'\), now by 'onsets'"),
        ({"min_leading_silence": 0.3}, r"utterance 'a' is stale \(min_leading_silence 0.0, now 0.3\)"),
        (
            {"options": {"n_mfcc": 20}},
            r"'a' was computed with options \{.*'n_mfcc': 13.*\}, not \{.*'n_mfcc': 20",
        ),
        ({"strategy": "semantic"}, r"utterance 'a' has a 'acoustic' order, but the strategy is 'semantic'"),
    ],
)
def test_stale_orders_are_refused(tmp_path, change, message):
    path = write_cache(tmp_path / "o.jsonl", small_index())
    settings = {"alignments": small_index(), **LOAD, **change}
    with pytest.raises(StaleOrderError, match=message):
        load_orders(path, **settings)


def test_shards_load_before_and_after_a_merge(tmp_path):
    """Shards of a run into o.jsonl load as one cache, and still do once merged beside them."""
    lines = write_cache(tmp_path / "whole.jsonl", small_index()).read_text().splitlines(keepends=True)
    parts = [shard_path(tmp_path / "o.jsonl", Shard(k, 2)) for k in range(2)]
    for part, line in zip(parts, lines):
        part.write_text(line)
    expected = {"a": [0, 3, 1, 2], "b": [1, 0]}
    unmerged = load_orders(tmp_path / "o.jsonl", alignments=small_index(), **LOAD)
    assert {k: v.tolist() for k, v in unmerged.items()} == expected
    merge_jsonl(parts, tmp_path / "o.jsonl")
    assert all(part.exists() for part in parts)  # the merge keeps its inputs
    merged = load_orders(tmp_path / "o.jsonl", alignments=small_index(), **LOAD)
    assert {k: v.tolist() for k, v in merged.items()} == expected
    with pytest.raises(FileNotFoundError, match=r"nothing.jsonl: order cache .* not found"):
        load_orders(tmp_path / "nothing.jsonl", alignments=small_index(), **LOAD)


def test_only_the_changed_utterance_is_stale(tmp_path):
    path = write_cache(tmp_path / "o.jsonl", small_index())
    changed = AlignmentIndex(
        ["a", "b"], [2.0, 1.0], [0, 3, 5], [0.2, 0.7, 1.2, 0.0, 0.6], [0.7, 1.2, 1.9, 0.6, 1.0], ["t"] * 2
    )
    with pytest.raises(StaleOrderError, match=r"o.jsonl:2: .*utterance 'b'"):
        load_orders(path, alignments=changed, **LOAD)


def test_mixed_options_and_bad_lines_name_the_line(tmp_path):
    index = small_index()
    path = tmp_path / "o.jsonl"
    write_cache(path, index)
    other = order_record(
        "a",
        [0, 1, 2, 3],
        strategy="acoustic",
        options={"n_mfcc": 20},
        alignments=small_index(),
        segment_policy="cover",
    )
    mixed = path.read_text() + other.replace('"id": "a"', '"id": "c"', 1) + "\n"
    (tmp_path / "mixed.jsonl").write_text(mixed)
    with pytest.raises(
        StaleOrderError, match=r"mixed.jsonl:3: .*options \{.*'n_mfcc': 20.*\}, not \{.*'n_mfcc': 13"
    ):
        load_orders(tmp_path / "mixed.jsonl", alignments=index, **LOAD)
    lines = path.read_text().splitlines()
    other_order = lines[0].replace("[0, 3, 1, 2]", "[0, 1, 3, 2]")
    (tmp_path / "dup.jsonl").write_text("\n".join([lines[0], lines[1], other_order]) + "\n")
    with pytest.raises(
        OrderCacheError, match=r"dup.jsonl:3: id 'a' already defined at .*dup.jsonl:1 with other content"
    ):
        load_orders(tmp_path / "dup.jsonl", alignments=index, **LOAD)
    (tmp_path / "bad.jsonl").write_text(lines[0] + "\n{not json\n")
    with pytest.raises(OrderCacheError, match=r"bad.jsonl:2: not valid JSON"):
        load_orders(tmp_path / "bad.jsonl", alignments=index, **LOAD)
    (tmp_path / "perm.jsonl").write_text(lines[0].replace("[0, 3, 1, 2]", "[0, 3, 3, 2]") + "\n")
    with pytest.raises(
        OrderCacheError, match=r"perm.jsonl:1: utterance 'a': order \[0, 3, 3, 2\] is not a permutation"
    ):
        load_orders(tmp_path / "perm.jsonl", alignments=index, **LOAD)
    # A writer killed mid-line: the unterminated tail is not an order; the rest loads.
    (tmp_path / "tail.jsonl").write_text(lines[0] + "\n" + lines[1][:20])
    assert list(load_orders(tmp_path / "tail.jsonl", alignments=index, **LOAD)) == ["a"]


def test_keys_hash_every_option_with_its_default(tmp_path):
    record = json.loads(order_record("a", [0, 3, 1, 2], alignments=small_index(), **{**LOAD, "options": {}}))
    # The authors' AR framing is written out, so a later change of a default changes the key.
    assert record["options"]["n_fft"] == 2048 and record["options"]["scale"] == 32768.0
    assert record["span_rule"] == "cover" and record["format"] == 2
    earlier = order_record("a", [0, 3, 1, 2], alignments=small_index(), **LOAD, options={"n_fft": 400})
    assert json.loads(earlier)["key"] != record["key"]


def test_a_cache_from_before_the_authors_defaults_is_refused(tmp_path):
    # What compute_orders.py wrote before: the 25 ms framing options only, no format, no span rule.
    old = {
        "id": "a",
        "strategy": "acoustic",
        "order": [0, 3, 1, 2],
        "key": "0123456789abcdef",
        "segment_policy": "cover",
        "min_leading_silence": 0.05,
        "options": {"n_mfcc": 13, "n_fft": 400, "hop_length": 160, "n_mels": 40, "fixed_frames": None},
    }
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(StaleOrderError, match=r"older version, without the option\(s\) \['leading_silence'"):
        load_orders(
            tmp_path / "old.jsonl", alignments=small_index(), strategy="acoustic", segment_policy="cover"
        )


def test_orders_of_unaligned_utterances_are_skipped(tmp_path):
    path = write_cache(tmp_path / "o.jsonl", small_index())
    only_a = AlignmentIndex(["a"], [2.0], [0, 3], [0.2, 0.7, 1.2], [0.7, 1.2, 1.9], ["t"])
    assert list(load_orders(path, alignments=only_a, **LOAD)) == ["a"]


def test_unknown_options_are_refused(train):
    _, alignments = train
    with pytest.raises(ValueError, match=r"unknown acoustic option\(s\) \['n_mfc'\]"):
        OrderComputer("acoustic", alignments, options={"n_mfc": 13})
    with pytest.raises(ValueError, match="nothing to precompute"):
        OrderComputer("random", alignments)
    with pytest.raises(ValueError, match="needs a Whisper model"):
        OrderComputer("semantic", alignments)


# --------------------------------------------------------------------------- the recipe


def load_recipe():
    spec = importlib.util.spec_from_file_location("compute_orders", REPO / "recipes" / "compute_orders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_shards_failures_and_training_reads_the_parts(train, vpac_root, tmp_path):
    items, alignments = train
    # A CSV manifest: four good utterances, one unreadable file, one without alignment, one NaN.
    good = subset(items)[:4]
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not audio")
    nan_audio = read_audio(good[0].source)
    nan_audio[100] = np.nan
    write_audio(tmp_path / "nan.wav", nan_audio, subtype="FLOAT")
    cache = tmp_path / "align.jsonl"
    extra = [
        {"id": utt, "duration": len(nan_audio) / 16000, "words": [{"word": "x", "start": 0.2, "end": 0.9}]}
        for utt in ("nan-utt", "broken-utt")
    ]
    cache.write_text(
        (vpac_root / "alignments" / "B3.jsonl").read_text() + "".join(json.dumps(r) + "\n" for r in extra)
    )
    rows = [f"{item.id},{item.source}" for item in good] + [
        f"broken-utt,{broken}",
        f"unaligned-utt,{good[1].source}",
        f"nan-utt,{tmp_path / 'nan.wav'}",
    ]
    manifest = tmp_path / "train.csv"
    manifest.write_text("ID,wav\n" + "\n".join(rows) + "\n")
    output = tmp_path / "orders" / "B3-acoustic.jsonl"
    recipe = load_recipe()
    base = [
        str(REPO / "hparams" / "orders.yaml"),
        f"--data_folder={vpac_root}",
        f"--input={manifest}",
        f"--alignment_cache={cache}",
        f"--orders_cache={output}",
        "--progress=False",
    ]
    statuses = [recipe.main(base + [f"--shard={k}/2"]) for k in range(2)]
    assert sorted(p.name for p in output.parent.glob("*.jsonl")) == [
        "B3-acoustic.part-000-of-002.jsonl",
        "B3-acoustic.part-001-of-002.jsonl",
    ]
    failures = read_failures(output)
    assert set(failures) == {"broken-utt", "unaligned-utt", "nan-utt"}
    assert "cannot read audio" in failures["broken-utt"] and "no word alignment" in failures["unaligned-utt"]
    # NaN audio: a counted failure naming the utterance, its file and the reason (the shared reader).
    assert (
        failures["nan-utt"].startswith("nan-utt:")
        and "nan.wav: 1 NaN or infinite samples" in failures["nan-utt"]
    )
    assert 1 in statuses  # a shard with failures exits non-zero
    # Training reads the parts without a merge, validated against the same alignments.
    orders = load_orders(
        output, strategy="acoustic", alignments=load_alignments(cache), segment_policy="authors"
    )
    assert sorted(orders) == sorted(item.id for item in good)
    # A rerun (unsharded, failures allowed) retries the failures only and exits 0.
    assert recipe.main(base + ["--allow_failures=True"]) == 0
    assert sum(1 for p in output.parent.glob("*.jsonl") for _ in p.read_text().splitlines()) == len(good)
    # Another option into the same cache is refused, with advice.
    with pytest.raises(JobError, match="write to a new output"):
        recipe.main(base + ["--acoustic_options={fixed_frames: 100}"])


def test_shard_assignment_is_stable():
    shards = [resolve_shard(f"{k}/3", env={}) for k in range(3)]
    assert all(sum(shard.owns(utt) for shard in shards) == 1 for utt in SUBSET)


def test_recipe_on_the_vpac_layout_then_training_reads_the_cache(vpac_root, tmp_path):
    # Default input: the system's training folder; wav.scp paths are relative to the VPAC root.
    output = tmp_path / "B3-acoustic.jsonl"
    args = [str(REPO / "hparams" / "orders.yaml"), f"--data_folder={vpac_root}", "--system=B3"]
    args += [f"--orders_cache={output}", "--progress=False", "--dtw_threads=1"]
    assert load_recipe().main(args) == 0
    alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
    orders = load_orders(output, strategy="acoustic", alignments=alignments, segment_policy="authors")
    folder = vpac_root / "B3" / "data" / "train-clean-360_B3"
    assert sorted(orders) == sorted(item.id for item in read_inputs(folder, root=vpac_root))
    # A training run with another segment policy must not reuse them.
    with pytest.raises(StaleOrderError, match="stale .*cut by 'onsets'.*now by 'words'"):
        load_orders(output, strategy="acoustic", alignments=alignments, segment_policy="words")


def test_a_job_array_of_orders_merges_into_what_one_process_writes(vpac_root, tmp_path, monkeypatch):
    """--launcher=slurm --shards=2, run through submitit's local executor (task processes on this machine;
    tests/test_align_recipe.py also submits its array to SLURM when a cluster answers)."""
    monkeypatch.setattr(jobs, "ARRAY_CLUSTER", "local")
    args = [str(REPO / "hparams" / "orders.yaml"), f"--data_folder={vpac_root}", "--system=B3"]
    args += ["--progress=False", "--dtw_threads=1"]
    one, array = tmp_path / "one.jsonl", tmp_path / "array.jsonl"
    assert load_recipe().main(args + [f"--orders_cache={one}"]) == 0
    slurm = ["--launcher=slurm", "--shards=2", "--slurm_cpus_per_task=1"]
    assert load_recipe().main(args + [f"--orders_cache={array}", *slurm]) == 0
    assert len(shard_files(array)) == 2
    assert sorted(array.read_text().splitlines()) == sorted(one.read_text().splitlines())


def test_sr_orders_from_before_the_context_option_are_refused(tmp_path):
    # An SR cache written before sr_context existed (utterance context, no "context" option).
    path = write_cache(
        tmp_path / "old.jsonl",
        small_index(),
        strategy="semantic",
        options={"whisper_model": "openai/whisper-medium"},
    )
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(record["options"]["context"] == "segment" for record in records)  # written now: named
    for record in records:
        del record["options"]["context"]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    load = dict(strategy="semantic", alignments=small_index(), segment_policy="cover")
    with pytest.raises(StaleOrderError, match=r"older version, without the option\(s\) \['context'\]"):
        load_orders(path, **load)
    with pytest.raises(StaleOrderError, match=r"older version, without the option\(s\) \['context'\]"):
        load_orders(path, required_options={"context": "segment"}, **load)


def test_training_reads_sr_orders_of_its_sr_context_only(vpac_root, tmp_path):
    alignment_cache = vpac_root / "alignments" / "B3.jsonl"
    alignments = load_alignments(alignment_cache)
    utt = next(utt for utt in alignments.ids if len(alignments.spans(utt)[0]) >= 4)
    wav = read_kaldi_map(vpac_root / "B3/data/train-clean-360_B3/wav.scp")[utt]
    audio = read_audio(vpac_root / wav)
    segments = word_segments(*alignments.spans(utt), len(audio), 16000, "cover", strategy="semantic")
    count = len(segments)
    settings = dict(strategy="semantic", alignments=alignments, segment_policy="cover")
    cache = tmp_path / "sr.jsonl"
    order = list(range(count))[::-1]
    # An SR cache of before the peak was stored (no "peak"): refused, naming the command that rebuilds it.
    cache.write_text(order_record(utt, order, options={"context": "segment"}, **settings) + "\n")
    with open(REPO / "hparams" / "ecapa_segreconcat.yaml") as fin:
        hparams = load_hyperpyyaml(
            fin,
            {
                "data_folder": str(vpac_root),
                "system": "B3",
                "strategy": "semantic",
                "alignment_cache": str(alignment_cache),
                "orders_cache": str(cache),
                "output_folder": str(tmp_path / "out"),  # the checkpointer makes its folder at load
                "segment_policy": "cover",
                "channels": [8, 8, 8, 8, 24],
            },
        )
    assert hparams["sr_context"] == "segment"  # the paper's default
    with pytest.raises(OrderCacheError, match="has no 'peak'") as refused:
        build_augmenter(hparams)
    message = str(refused.value)
    assert "\n" not in message and isinstance(refused.value, UserError)
    assert (
        f"python recipes/compute_orders.py hparams/orders.yaml --data_folder={vpac_root} --system=B3 "
        f"--strategy=semantic --alignment_cache={alignment_cache} --segment_policy=cover" in message
    )
    assert f"--sr_context=segment --orders_cache={cache}" in message
    # Without sr_pad_normalize the peak is not needed.
    assert build_augmenter({**hparams, "sr_pad_normalize": False}) is not None
    record = order_record(utt, order, options={"context": "segment"}, **settings, peak=0.5)
    cache.write_text(record + "\n")
    augmenter = build_augmenter(hparams)
    assert augmenter.peaks == {utt: 0.5} and augmenter.plans_from_length
    assert augmenter.strategy.name == "semantic" and augmenter.orders[utt].tolist() == order
    # The rearranged copy follows the cached order: the original, then its segments last to first.
    plan, _ = augmenter.plan(audio, utt, 1)
    assert plan.source[0].tolist() == [0, len(audio)]
    assert plan.source[1:].tolist() == segments.spans[::-1].tolist()
    hparams["sr_context"] = "utterance"
    with pytest.raises(StaleOrderError, match="option context='segment'.*not 'utterance'"):
        build_augmenter(hparams)


def test_orders_yaml_sr_context_feeds_the_semantic_options(tmp_path):
    with open(REPO / "hparams" / "orders.yaml") as fin:
        hparams = load_hyperpyyaml(fin, {"data_folder": str(tmp_path), "sr_context": "utterance"})
    assert hparams["semantic_options"]["context"] == "utterance"
    hparams["semantic_options"] = {"context": "segment"}  # contradicts sr_context: refused before any work
    hparams["strategy"] = "semantic"
    with pytest.raises(
        ValueError, match="semantic_options.context='segment' contradicts sr_context='utterance'"
    ):
        load_recipe().build_computer(hparams, small_index())

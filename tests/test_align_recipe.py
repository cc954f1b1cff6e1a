"""recipes/align.py end to end: bad input, shards + merge, kill -9 and resume, Whisper, import."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from vpac_fixture import FIXTURES, kill_when_written

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data import jobs
from segreconcat_aug.data.audio import resample_wave
from segreconcat_aug.data.jobs import jsonl_ids, read_failures
from segreconcat_aug.data.kaldi import read_kaldi_map, write_kaldi_map
from segreconcat_aug.errors import OptionError

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "align.py"
HPARAMS = str(REPO / "hparams" / "align.yaml")
TEXTS = read_kaldi_map(FIXTURES / "text")


def _load_recipe():
    spec = importlib.util.spec_from_file_location("align_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recipe():
    return _load_recipe()


def _folder(path: Path, wav: dict, text: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    write_kaldi_map(path / "wav.scp", wav, sort=False)
    write_kaldi_map(path / "text", text)
    return path


def _run(recipe, *args):
    return recipe.main([HPARAMS, *args, "--noprogressbar"])


def test_bad_input_lands_in_failures_and_sets_exit_status(recipe, tmp_path):
    audio, _ = soundfile.read(FIXTURES / "26-495-0018.flac", dtype="float32")
    (tmp_path / "audio").mkdir()
    soundfile.write(tmp_path / "audio" / "rate8k.wav", resample_wave(audio, 16000, 8000), 8000)
    soundfile.write(tmp_path / "audio" / "empty.wav", np.zeros(0, np.float32), 16000)
    (tmp_path / "audio" / "garbage.wav").write_text("not audio")
    flac = FIXTURES / "26-495-0007.flac"
    wav = {
        "good": str(flac),
        "no-text": str(FIXTURES / "26-495-0019.flac"),
        "unreadable": str(tmp_path / "audio" / "garbage.wav"),
        "missing": str(tmp_path / "audio" / "nowhere.wav"),
        "empty": str(tmp_path / "audio" / "empty.wav"),
        "rate8k": str(tmp_path / "audio" / "rate8k.wav"),
        "pipe": f"cat {flac} |",
    }
    text = {utt: TEXTS["26-495-0007"] for utt in wav if utt != "no-text"}
    text["rate8k"] = TEXTS["26-495-0018"]
    folder = _folder(tmp_path / "data", wav, text)
    out = tmp_path / "cache.jsonl"
    args = [f"--data_folder={folder}", f"--output={out}", "--backend=pocketsphinx"]
    assert _run(recipe, *args) == 1
    failures = read_failures(out)
    expected = {
        "no-text": "no transcript",
        "unreadable": "cannot read audio",
        "missing": "cannot read audio",
        "empty": "empty audio",
        "rate8k": "sample rate 8000 Hz",
        "pipe": "shell pipe",
    }
    assert set(failures) == set(expected)
    for utt, reason in expected.items():
        assert reason in failures[utt], (utt, failures[utt])
    assert set(jsonl_ids(out)) == {"good"}
    # Resampling and pipes enabled: those two now align; the rest is allowed to fail.
    assert _run(recipe, *args, "--resample=True", "--allow_pipes=True", "--allow_failures=True") == 0
    index = load_alignments(out, keep_words=True)
    assert set(index.ids) == {"good", "rate8k", "pipe"}
    assert len(index.get("rate8k").words) == len(TEXTS["26-495-0018"].split())
    assert set(read_failures(out)) == set(expected) - {"rate8k", "pipe"}


def test_shards_then_merge(recipe, vpac_root, tmp_path):
    folder = vpac_root / "B3" / "data" / "train-clean-360_B3"
    out = tmp_path / "b3.jsonl"
    common = [
        f"--data_folder={folder}",
        f"--data_root={vpac_root}",
        f"--output={out}",
        "--backend=pocketsphinx",
    ]
    for shard in ("0/2", "1/2"):
        assert _run(recipe, *common, f"--shard={shard}", "--allow_failures=True") == 0
    parts = sorted(p.name for p in tmp_path.glob("b3.part-*.jsonl"))
    assert parts == ["b3.part-000-of-002.jsonl", "b3.part-001-of-002.jsonl"]
    with_text = set(read_kaldi_map(folder / "text"))
    # Utterances without a transcript failed: a strict merge refuses the incomplete set.
    assert _run(recipe, *common, "--merge=True") == 1
    assert not out.exists()
    assert _run(recipe, *common, "--merge=True", "--allow_failures=True") == 0
    index = load_alignments(out)
    assert set(index.ids) == with_text and set(index.aligners) == {"pocketsphinx:en-us"}
    # A rerun over the merged result and its parts has nothing to do.
    assert _run(recipe, *common, "--shard=0/2", "--allow_failures=True") == 0
    assert len(jsonl_ids(tmp_path / "b3.part-000-of-002.jsonl")) + len(
        jsonl_ids(tmp_path / "b3.part-001-of-002.jsonl")
    ) == len(with_text)


def test_kill_9_mid_run_then_resume_loses_nothing_duplicates_nothing(tmp_path):
    copies = 4
    wav, text = {}, {}
    for k in range(copies):
        for utt, transcript in TEXTS.items():
            wav[f"c{k}-{utt}"] = str(FIXTURES / f"{utt}.flac")
            text[f"c{k}-{utt}"] = transcript
    folder = _folder(tmp_path / "data", wav, text)
    out = tmp_path / "cache.jsonl"
    command = [
        sys.executable,
        str(RECIPE),
        HPARAMS,
        f"--data_folder={folder}",
        f"--output={out}",
        "--backend=pocketsphinx",
        "--noprogressbar",
    ]
    partial = tmp_path / "cache.jsonl.partial"  # the running shard's lines; cache.jsonl appears when it ends
    kill_when_written(command, partial, lines=3, cwd=REPO)
    assert not out.exists()
    data = partial.read_bytes()
    assert 3 <= data.count(b"\n") < len(wav)
    # As if the kill had landed in the middle of writing a record: cut the last line in two.
    last = data.rstrip(b"\n").rfind(b"\n")
    partial.write_bytes(data[: len(data) - (len(data) - last) // 2])
    torn = json.loads(data[last + 1 :])["id"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = out.read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert sorted(ids) == sorted(wav) and not partial.exists()  # none lost, none duplicated
    assert ids.count(torn) == 1
    assert len(load_alignments(out).get(torn).words) == len(text[torn].split())


def test_whisper_backend_through_the_recipe(recipe, tmp_path):
    utts = ["26-495-0007", "27-123349-0009", "1998-15444-0007"]
    folder = _folder(tmp_path / "data", {u: str(FIXTURES / f"{u}.flac") for u in utts}, {})
    out = tmp_path / "cache"
    args = [
        f"--data_folder={folder}",
        f"--output={out}",
        "--backend=transformers",
        "--whisper_model=tiny-random-whisper",
        "--batch_size=2",
        "--max_new_tokens=12",
        "--device=cpu",
    ]
    assert _run(recipe, *args) == 0
    index = load_alignments(out)
    assert sorted(index.ids) == sorted(utts)
    assert set(index.aligners) == {"transformers:tiny-random-whisper"}
    for utt in utts:
        starts, ends = index.spans(utt)
        assert np.all(ends <= index.duration(utt)) and np.all(starts[1:] >= ends[:-1])
        assert index.duration(utt) == pytest.approx(soundfile.info(FIXTURES / f"{utt}.flac").duration)


def test_import_entry_point(recipe, tmp_path):
    (tmp_path / "a.ctm").write_text("u1 1 0.1 0.3 hi\nu2 1 0.2 0.2 yo\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wav.scp").write_text("u1 a.wav\nu2 b.wav\nu3 c.wav\n")
    (tmp_path / "data" / "utt2dur").write_text("u1 1.5\nu2 2.0\nu3 1.0\n")
    args = [f"--import_from={tmp_path / 'a.ctm'}", f"--output={tmp_path / 'c.jsonl'}", "--backend=ctm"]
    assert _run(recipe, *args, f"--data_folder={tmp_path / 'data'}") == 1  # u3 is not in the CTM
    index = load_alignments(tmp_path / "c.jsonl")
    assert index.duration("u1") == 1.5 and index.aligners == ["ctm", "ctm"]
    assert "u3" in read_failures(tmp_path / "c.jsonl")


def _slurm_answers() -> bool:
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.xdist_group("slurm")  # with tests/test_slurm_grid.py: one worker at a time on the cluster
@pytest.mark.parametrize("cluster", ["local", "slurm"])
def test_a_job_array_merges_into_the_cache_one_process_writes(
    recipe, vpac_root, tmp_path, monkeypatch, cluster
):
    """--launcher=slurm --shards=3: three array tasks, then the merge, give the cache of one process.

    ``local`` runs the same array through submitit's local executor (task processes on this machine);
    ``slurm`` submits it to the cluster that ``sinfo`` answers for, and is skipped without one.
    """
    if cluster == "slurm" and not _slurm_answers():
        pytest.skip("no SLURM cluster answers sinfo here")
    monkeypatch.setattr(jobs, "ARRAY_CLUSTER", cluster)
    folder = vpac_root / "B3" / "data" / "train-clean-360_B3"
    common = [
        f"--data_folder={folder}",
        f"--data_root={vpac_root}",
        "--backend=transformers",
        "--whisper_model=tiny-random-whisper",
        "--batch_size=2",
        "--max_new_tokens=12",
        "--device=cpu",
    ]
    one = tmp_path / "one.jsonl"
    assert _run(recipe, *common, f"--output={one}") == 0
    array = tmp_path / "array.jsonl"
    slurm = ["--launcher=slurm", "--shards=3", "--slurm_gpus_per_node=null", "--slurm_cpus_per_task=1"]
    assert _run(recipe, *common, f"--output={array}", *slurm) == 0
    assert [p.name for p in sorted(tmp_path.glob("array.part-*.jsonl"))] == [
        f"array.part-00{k}-of-003.jsonl" for k in range(3)
    ]
    assert sorted(array.read_text().splitlines()) == sorted(one.read_text().splitlines())
    assert load_alignments(array).ids == load_alignments(array, use_index=False).ids
    # A rerun finds every shard done: it submits nothing and merges the same lines again.
    merged = array.read_text()
    (tmp_path / "array.jsonl.submitit").rename(tmp_path / "first-logs")
    assert _run(recipe, *common, f"--output={array}", *slurm) == 0
    assert array.read_text() == merged and not (tmp_path / "array.jsonl.submitit").exists()


def test_array_options_are_checked_before_anything_runs(recipe, tmp_path):
    base = [f"--data_folder={tmp_path}", f"--output={tmp_path / 'x.jsonl'}"]
    for args, message in [
        (["--launcher=pbs"], "option launcher: 'pbs': input should be 'local' or 'slurm'"),
        (["--shards=3"], "size of a --launcher=slurm job array"),
        (["--launcher=slurm"], "needs the number of array tasks"),
        (["--launcher=slurm", "--shards=3", "--shard=0/2"], "give one of them"),
        (
            ["--launcher=slurm", "--shards=3", "--slurm_mem_gb=lots"],
            'slurm_mem_gb: Parameter "mem_gb" expected',
        ),
    ]:
        with pytest.raises(OptionError, match=message):
            _run(recipe, *base, *args)
    assert sorted(tmp_path.iterdir()) == []

"""Batch-job utilities: shards, resume, failures, merge, input readers."""

import json

import pytest
from vpac_fixture import FIXTURES, fixture_utterances

from segreconcat_aug.data.jobs import (
    Job,
    JobError,
    Shard,
    jsonl_ids,
    merge_jsonl,
    read_failures,
    resolve_shard,
    shard_path,
)
from segreconcat_aug.data.jsonl_files import shard_files
from segreconcat_aug.data.kaldi import PipeCommand
from segreconcat_aug.data.vpac import JobItem, read_inputs


def _ids(n):
    return [f"utt-{k:04d}" for k in range(n)]


def _run(output, ids, shard=None, fail=()):
    with Job(output, shard=shard or Shard(), progress=False) as job:
        for utt in job.track(job.pending(ids)):
            if utt in fail:
                job.fail(utt, ValueError("bad"))
            else:
                job.write(utt, json.dumps({"id": utt}))
        return job


def test_shards_partition_ids_exactly():
    ids = _ids(500)
    owners = [[k for k in range(7) if Shard(k, 7).owns(utt)] for utt in ids]
    assert all(len(o) == 1 for o in owners)
    sizes = [sum(o[0] == k for o in owners) for k in range(7)]
    assert min(sizes) > 40  # hashed, so roughly balanced (500 / 7 = 71)


def test_resolve_shard_validates_and_combines_with_torchrun():
    assert resolve_shard(None, env={}) == Shard(0, 1)
    assert resolve_shard("0/3", env={"RANK": "1", "WORLD_SIZE": "2"}) == Shard(1, 6)
    for bad in ("3/3", "a/b", "1", "-1/2"):
        with pytest.raises(ValueError, match="shard"):
            resolve_shard(bad, env={})


def test_sharded_runs_then_merge_cover_every_id_once(tmp_path):
    ids = _ids(40)
    for k in range(3):
        _run(tmp_path / "out", ids, Shard(k, 3))
    parts = shard_files(tmp_path / "out")
    assert [p.name for p in parts] == [shard_path("out", Shard(k, 3)).name for k in range(3)]
    assert merge_jsonl(parts, tmp_path / "all.jsonl", expected_ids=ids) == 40
    assert sorted(jsonl_ids(tmp_path / "all.jsonl")) == ids


def test_file_target_uses_part_names_next_to_it(tmp_path):
    target = tmp_path / "b3.jsonl"
    _run(target, _ids(10), Shard(1, 2))
    assert shard_files(target) == [tmp_path / "b3.part-001-of-002.jsonl"]
    _run(target, _ids(10), Shard(0, 2))
    merge_jsonl(shard_files(target), target)
    assert len(jsonl_ids(target)) == 10
    # A single-shard rerun on the merged file finds nothing to do.
    assert _run(target, _ids(10)).written == 0


def test_merge_refuses_conflicts_and_unfinished_shards(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "x"}\n{"id": "y"}\n')
    (tmp_path / "b.jsonl").write_text('{"id": "y", "n": 2}\n')
    with pytest.raises(
        JobError, match=r"b.jsonl:1: id 'y' already defined at .*a.jsonl:2 with other content"
    ):
        merge_jsonl([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "m.jsonl")
    assert not (tmp_path / "m.jsonl").exists()
    (tmp_path / "b.jsonl").write_text('{"id": "z"}\n{"id": "w"')
    with pytest.raises(JobError, match="unterminated"):
        merge_jsonl([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "m.jsonl")
    with pytest.raises(JobError, match="expected id"):
        merge_jsonl([tmp_path / "a.jsonl"], tmp_path / "m.jsonl", expected_ids=["x", "q"])
    # a refused merge leaves neither the output nor its temporary file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]


def test_merge_writes_a_line_found_twice_once(tmp_path):
    """The merged file among its inputs (a rerun's merge): each id once, nothing lost."""
    (tmp_path / "a.jsonl").write_text('{"id": "x"}\n{"id": "y"}\n')
    (tmp_path / "m.jsonl").write_text('{"id": "y"}\n{"id": "w"}\n')
    lines = merge_jsonl(
        [tmp_path / "m.jsonl", tmp_path / "a.jsonl"], tmp_path / "m.jsonl", expected_ids="wxy"
    )
    assert lines == 3 and list(jsonl_ids(tmp_path / "m.jsonl")) == ["y", "w", "x"]


@pytest.mark.parametrize("killed", ["partial", "finished"])
def test_resume_truncates_half_line_and_skips_done(tmp_path, killed):
    """A kill in the middle of the sixth record: in the running shard's .partial, or (a file written by
    appending to the shard file itself) in the shard file."""
    ids = _ids(12)
    path = shard_path(tmp_path / "out")
    path.parent.mkdir()
    torn = path.with_name(path.name + ".partial") if killed == "partial" else path
    done = "".join(json.dumps({"id": utt}) + "\n" for utt in ids[:5])
    torn.write_text(done + '{"id": "' + ids[5])
    assert read_failures(tmp_path / "out") == {} and shard_files(tmp_path / "out") == (
        [path] * (torn == path)
    )
    job = _run(tmp_path / "out", ids)
    assert job.previously_done == 5 and job.written == 7
    lines = path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids
    assert not torn.with_name(path.name + ".partial").exists()


def test_a_stopped_shard_is_not_read_until_it_is_done(tmp_path):
    """The shard file appears whole when the shard ends; a stopped run's lines wait in its .partial."""
    ids = _ids(6)
    with pytest.raises(KeyboardInterrupt), Job(tmp_path / "o.jsonl", progress=False) as job:
        for utt in job.track(job.pending(ids)):
            if utt == ids[3]:
                raise KeyboardInterrupt
            job.write(utt, json.dumps({"id": utt}))
    assert not (tmp_path / "o.jsonl").exists() and len(jsonl_ids(tmp_path / "o.jsonl.partial")) == 3
    assert _run(tmp_path / "o.jsonl", ids).written == 3
    assert list(jsonl_ids(tmp_path / "o.jsonl")) == ids and not (tmp_path / "o.jsonl.partial").exists()


def test_changing_shard_count_never_duplicates(tmp_path):
    ids = _ids(30)
    _run(tmp_path / "out", ids, Shard(0, 2))
    job = _run(tmp_path / "out", ids, Shard(0, 3))  # re-sharded: siblings' ids count as done
    _run(tmp_path / "out", ids, Shard(1, 3))
    _run(tmp_path / "out", ids, Shard(2, 3))
    assert job.previously_done > 0
    assert merge_jsonl(shard_files(tmp_path / "out"), tmp_path / "all.jsonl", expected_ids=ids) == 30


def test_failures_file_counts_and_retry(tmp_path):
    ids = _ids(6)
    job = _run(tmp_path / "out", ids, fail={"utt-0002", "utt-0004"})
    assert job.failed == 2 and job.failures == {"ValueError": 2}
    assert "2 failed (ValueError: 2)" in job.summary()
    assert read_failures(tmp_path / "out") == {"utt-0002": "bad", "utt-0004": "bad"}
    # The rerun retries exactly the failed ids; the failures file is rewritten.
    job = _run(tmp_path / "out", ids)
    assert job.written == 2 and job.failed == 0 and read_failures(tmp_path / "out") == {}


@pytest.mark.parametrize("target", ["out", "out.jsonl"])
def test_failures_of_a_shard_that_wrote_nothing_are_read(tmp_path, target):
    ids = _ids(8)
    mine = [utt for utt in ids if Shard(0, 2).owns(utt)]
    _run(tmp_path / target, ids, shard=Shard(0, 2), fail=set(mine))  # every one of its utterances fails
    _run(tmp_path / target, ids, shard=Shard(1, 2), fail={next(u for u in ids if Shard(1, 2).owns(u))})
    assert not shard_path(tmp_path / target, Shard(0, 2)).exists()  # no line written: no part file
    failed = read_failures(tmp_path / target)
    assert set(mine) < set(failed) and len(failed) == len(mine) + 1


def test_same_shard_twice_at_once_is_refused(tmp_path):
    with Job(tmp_path / "out", progress=False):
        with pytest.raises(JobError, match="another process"):
            Job(tmp_path / "out", progress=False)


def test_write_refuses_an_id_twice(tmp_path):
    with Job(tmp_path / "out", progress=False) as job:
        job.write("a", '{"id": "a"}')
        with pytest.raises(JobError, match="already written"):
            job.write("a", '{"id": "a"}')


def test_track_batches_and_records_problems(tmp_path):
    items = [JobItem(f"u{k}", "x.wav", None, "refused pipe" if k == 3 else None) for k in range(8)]
    with Job(tmp_path / "out", progress=False) as job:
        batches = list(job.track(job.pending(items), batch_size=3))
    assert [[i.id for i in b] for b in batches] == [["u0", "u1", "u2"], ["u4", "u5", "u6"], ["u7"]]
    assert job.failures == {"refused": 1}


def test_read_inputs_kaldi_folder_with_pipes(tmp_path):
    utts = sorted(fixture_utterances())[:3]
    lines = [f"{utts[0]} {FIXTURES / (utts[0] + '.flac')}", f"{utts[1]} flac -c -d x.flac |"]
    lines.append(f"{utts[2]} {utts[2]}.flac")
    (tmp_path / "wav.scp").write_text("\n".join(lines) + "\n")
    (tmp_path / "text").write_text(f"{utts[0]} HELLO THERE\n")
    items = read_inputs(tmp_path)
    assert [i.id for i in items] == utts
    assert items[0].text == "HELLO THERE" and items[2].text is None
    assert items[1].problem and "pipe" in items[1].problem and items[0].problem is None
    assert items[2].source == str(tmp_path / f"{utts[2]}.flac")
    allowed = read_inputs(tmp_path, allow_pipes=True)
    assert isinstance(allowed[1].source, PipeCommand) and allowed[1].problem is None


def test_read_inputs_csv(tmp_path):
    (tmp_path / "m.csv").write_text("ID,duration,wav,wrd\nu1,1.0,a/u1.flac,HI\nu2,2.0,/abs/u2.flac,YO\n")
    items = read_inputs(tmp_path / "m.csv")
    assert items[0] == JobItem("u1", str(tmp_path / "a/u1.flac"), "HI")
    assert items[1].source == "/abs/u2.flac"
    (tmp_path / "d.csv").write_text("ID,wav\nu1,a.wav\nu1,b.wav\n")
    with pytest.raises(ValueError, match=r"d.csv:3: ID 'u1' already on line 2"):
        read_inputs(tmp_path / "d.csv")
    (tmp_path / "n.csv").write_text("utt,path\nu1,a.wav\n")
    with pytest.raises(ValueError, match="needs columns ID and wav"):
        read_inputs(tmp_path / "n.csv")


def test_a_run_stopped_before_its_first_line_leaves_no_files(tmp_path):
    """Nothing broken is cached: a model that fails to load after the job opened its files (e.g. a
    size name offline) leaves no empty x.jsonl or x.failures.tsv; what existed before stays."""
    target = tmp_path / "x.jsonl"
    with pytest.raises(RuntimeError, match="no model"), Job(target, progress=False):
        raise RuntimeError("no model")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".x.jsonl.lock"
    ]  # the shard's lock (lock_folder), hidden
    with Job(target, progress=False) as job:
        job.write("a", json.dumps({"id": "a"}))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".x.jsonl.lock",
        "x.jsonl",
    ]  # no empty failures file
    with Job(target, progress=False) as job:  # all done: the cache is kept as it is
        assert job.pending(["a"]) == []
    assert target.read_text() == '{"id": "a"}\n'

"""Small examples of the grid, job, cache and training bookkeeping functions (once their doctests)."""

import json
from collections import Counter

import pytest
import torch

from segreconcat_aug.align.cache import Word, clean_words, index_path
from segreconcat_aug.data.convergence import convergence, loss_trend
from segreconcat_aug.data.jobs import Job, Shard, merge_jsonl, read_failures, resolve_shard, shard_path
from segreconcat_aug.data.jsonl_files import RepeatedIds, shard_files
from segreconcat_aug.data.vpac import JobItem, read_inputs
from segreconcat_aug.grid.plan import cell_folder, run_environment, split_unit
from segreconcat_aug.grid.runner import config_setting, format_command, overrides_string, step_command
from segreconcat_aug.training.progress import convergence_line, format_duration
from segreconcat_aug.training.run_settings import damaged_file_problem, run_settings


def test_clean_words_sorts_clamps_cuts_overlaps_and_counts():
    stats = Counter()
    words = [Word("b", 0.4, 0.9), Word("a", -0.1, 0.6), Word("c", 1.5, 1.5), Word(" ", 0.9, 1.0)]
    assert clean_words(words, 1.0, stats) == [Word("a", 0.0, 0.5), Word("b", 0.5, 0.9)]
    assert stats == {
        "clamped": 2,
        "dropped_empty": 1,
        "dropped_no_text": 1,
        "overlaps_resolved": 1,
        "reordered": 1,
    }


def test_index_beside_the_cache_first():
    assert index_path("/data/align/B3.jsonl").name == ".B3.jsonl.segreconcat-index.npz"


def test_loss_trend_and_convergence_flags():
    assert (loss_trend([4.0, 2.0, 1.0]), loss_trend([2.0, 2.0]), loss_trend([2.0])) == (-0.5, 0.0, None)

    def record(epoch, dev, stop=False):
        return {"epoch": epoch, "train": {"loss": 2.0}, "valid": {"loss": dev}, "should_stop": stop}

    stopped = convergence([record(1, 3.0), record(2, 2.5), record(3, 2.6), record(4, 2.7, True)])
    assert (stopped["best_epoch"], stopped["stopped_early"], stopped["flags"]) == (2, True, [])
    falling = convergence([record(1, 3.0), record(2, 2.5), record(3, 2.0)], limit=3)
    assert [flag["text"] for flag in falling["flags"]] == [
        "best epoch is the last: the lowest dev loss is at epoch 3 of 3 (the epoch limit) and early stopping "
        "never triggered, so more epochs would likely have lowered it",
        "dev loss still falling: -18.4 % per epoch over the last 3 epochs (a flag below -1 %)",
    ]


def test_two_shards_then_merge_and_a_rerun_retries_the_failure(tmp_path):
    out = tmp_path / "cache"
    items = [JobItem(f"u{k}", f"/audio/u{k}.wav", None) for k in range(6)]
    for spec in ("0/2", "1/2"):
        with Job(out, shard=resolve_shard(spec, env={}), progress=False) as job:
            for item in job.track(job.pending(items)):
                if item.id == "u3":
                    job.fail(item.id, "cannot read audio", kind="unreadable")
                else:
                    job.write(item.id, json.dumps({"id": item.id, "n": 1}))
    assert sorted(p.name for p in out.glob("part-*")) == [
        "part-000-of-002.failures.tsv",
        "part-000-of-002.jsonl",
        "part-001-of-002.jsonl",
    ]
    lines = merge_jsonl(shard_files(out), tmp_path / "all.jsonl")
    assert (lines, sorted(read_failures(out))) == (5, ["u3"])
    with Job(out, shard=resolve_shard("0/1", env={}), progress=False) as job:
        assert [item.id for item in job.pending(items)] == ["u3"]


def test_shards_and_their_files():
    assert sum(Shard(k, 3).owns("x") for k in range(3)) == 1
    assert resolve_shard("2/4", env={}) == Shard(2, 4)
    assert resolve_shard(None, env={"RANK": "3", "WORLD_SIZE": "8"}) == Shard(3, 8)
    assert resolve_shard("1/4", env={"RANK": "3", "WORLD_SIZE": "8"}) == Shard(11, 32)
    assert shard_path("cache", Shard(2, 8)).as_posix() == "cache/part-002-of-008.jsonl"
    assert shard_path("b3.jsonl", Shard(2, 8)).as_posix() == "b3.part-002-of-008.jsonl"
    assert shard_path("b3.jsonl").as_posix() == "b3.jsonl"


def test_csv_manifest_placeholders(tmp_path):
    (tmp_path / "m.csv").write_text("ID,duration,wav,text\nu1,1.0,$data_root/u1.wav,HELLO\n")
    item = read_inputs(tmp_path / "m.csv", replacements={"data_root": "/data"})[0]
    assert (item.id, item.source, item.text) == ("u1", "/data/u1.wav", "HELLO")


def test_repeated_ids():
    seen = RepeatedIds(ValueError)
    assert not seen.is_repeat("u1", "a.jsonl:1", '{"id": "u1"}\n')
    assert seen.is_repeat("u1", "b.jsonl:4", '{"id": "u1"}')
    with pytest.raises(
        ValueError, match=r"^b.jsonl:5: id 'u1' already defined at a.jsonl:1 with other content$"
    ):
        seen.is_repeat("u1", "b.jsonl:5", '{"id": "u1", "x": 1}')


def test_grid_plan_helpers():
    assert run_environment({"environment": {"OMP_NUM_THREADS": 1, "A": "x"}}, base={"A": "y"}) == {
        "A": "y",
        "OMP_NUM_THREADS": "1",
    }
    assert (split_unit("BM1/de"), split_unit("T8-5")) == (("BM1", "de"), ("T8-5", None))
    assert cell_folder({"output_folder": "grid"}, "BM1/de", "base", 3).as_posix() == "grid/BM1/de/base/seed3"


def test_grid_command_helpers():
    assert format_command("{python} x.py --a={a} {extra}", {"python": "py", "a": "1 2", "extra": ""}) == [
        "py",
        "x.py",
        "--a=1 2",
    ]
    assert format_command("x.py --b=False {extra}", {"extra": "--b=True --c=1"}) == [
        "x.py",
        "--b=True",
        "--c=1",
    ]
    assert (
        overrides_string({"device": "cuda:0", "channels": [16, 16]}) == "--device=cuda:0 '--channels=[16,16]'"
    )
    assert overrides_string("--mode=none") == "--mode=none"
    grid = {"train_command": "train", "configurations": {"a": {}, "b": {"train_command": ""}}}
    assert (config_setting(grid, "a", "train_command"), config_setting(grid, "b", "train_command")) == (
        "train",
        "",
    )
    grid = {
        "output_folder": "g",
        "train_hparams": "t.yaml",
        "data_folder": "d",
        "eval_command": "{overrides}",
        "configurations": {"ft": {}, "ft_asnorm": {"model_of": "ft"}},
    }
    assert step_command(grid, "B4", "ft_asnorm", None, "eval") == (["--eval_model_folder=g/B4/ft/export"], "")
    assert step_command(grid, "B4", "ft", 3, "eval") == (["--seed=3"], "")


def test_progress_texts():
    assert (format_duration(42), format_duration(150), format_duration(7300)) == ("42 s", "2.5 min", "2.0 h")
    assert (
        convergence_line({"flags": [{"name": "x", "text": "best epoch is the last: ..."}]})
        == "convergence flags: best epoch is the last: ... (the EER may overstate privacy; docs/evaluation.md)"
    )
    assert (
        convergence_line({"flags": [], "best_epoch": 3, "last_epoch": 5})
        == "convergence: no flag (best dev loss at epoch 3 of 5)"
    )


def test_run_settings_and_damaged_checkpoints(tmp_path):
    values = {"mode": "concat", "protocol": "vpac2024", "channels": (8, 24), "lr": 0.01, "epochs": 9}
    assert run_settings(values) == {"mode": "concat", "channels": [8, 24], "lr": 0.01}
    assert run_settings({"system": "T10-2", "train_systems": ["B5", "B4"]})["train_systems"] == [
        "B4",
        "B5",
        "T10-2",
    ]
    path = tmp_path / "model.ckpt"
    torch.save({"w": torch.zeros(1000)}, path)
    assert damaged_file_problem(path) is None
    path.write_bytes(path.read_bytes()[:2000])
    assert damaged_file_problem(path) == "cut short (2000 bytes; a torch.save file whose end is missing)"

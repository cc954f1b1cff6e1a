"""Issue 22: every user mistake is one line and exit 2 in every recipe, a refused run changes nothing on disk,
a failed run never blocks the corrected one, and a file an error message cites is kept.

The table runs each case through its real recipe, each in a process of its own (``forked_recipes.py``:
the console script's path, forked after the imports), and checks the exit status, the one error line
and the digests of the folders the case could touch, before and after.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from model_folders import VPC_YAML, hub_folder
from test_model_safety import hostile
from test_train import TINY as TRAIN_TINY

from segreconcat_aug import cli
from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data.folder_lock import lock_folder
from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.errors import UserError
from segreconcat_aug.grid.runner import GRID_LOCK
from segreconcat_aug.method.orders import order_record

# One pytest-xdist worker runs the module: its table fixture (every case's recipe) is built once.
pytestmark = pytest.mark.xdist_group("user_errors")
REPO = Path(__file__).resolve().parents[1]
HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"
TINY = [*TRAIN_TINY, "--number_of_epochs=1"]
SCRIPTS = {
    "train": "train.py",
    "evaluate": "evaluate.py",
    "align": "align.py",
    "orders": "compute_orders.py",
    "anonymize": "anonymize.py",
    "grid": "run_grid.py",
    "attackers": "run_grid.py",
}


def args(*parts) -> list[str]:
    """The arguments of ``parts`` (lists or strings), a later ``--key=`` replacing an earlier one."""
    flat = [item for part in parts for item in ([part] if isinstance(part, (str, Path)) else part)]
    keys = [str(item).split("=", 1)[0] for item in flat]
    return [str(item) for k, item in enumerate(flat) if keys[k] not in keys[k + 1 :]]


def started_run(folder: Path, argv: list[str]) -> Path:
    """What a training that has started leaves in ``folder``: one checkpoint, the YAML as run
    (SpeechBrain's ``hyperparams.yaml``) and a manifest."""
    import speechbrain as sb
    from hyperpyyaml import resolve_references
    from speechbrain.utils.checkpoints import Checkpointer

    _, _, overrides = sb.parse_arguments([str(HPARAMS), *argv, f"--output_folder={folder}"])
    folder.mkdir(parents=True)
    with open(HPARAMS, encoding="utf-8") as handle:
        (folder / "hyperparams.yaml").write_text(resolve_references(handle, overrides).getvalue())
    (folder / "train.csv").write_text("ID,utt_id,wav,duration,spk_id\nu@0,u,u.wav,3.0,s\n")
    Checkpointer(folder / "save", {"model": torch.nn.Linear(1, 1)}).save_checkpoint(meta={"loss": 1.0})
    return folder


def exported_model(folder: Path, **sizes) -> Path:
    """``<folder>/export/embedding_model.ckpt`` of a random tiny ECAPA-TDNN (what train.py exports)."""
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN

    torch.manual_seed(0)
    sizes = {"channels": [16, 16, 16, 16, 48], "attention_channels": 8, "lin_neurons": 16, **sizes}
    (folder / "export").mkdir(parents=True)
    torch.save(ECAPA_TDNN(80, **sizes).state_dict(), folder / "export" / "embedding_model.ckpt")
    return folder


def broken_copy(vpac_root, root: Path) -> tuple[Path, list[str], str]:
    """T8-5 with two training files missing and a dev trial file holding NaN samples."""
    shutil.copytree(vpac_root / "T8-5", root / "T8-5")
    shutil.copytree(vpac_root / "alignments", root / "alignments")
    train = root / "T8-5/data/train-clean-360_T8-5"
    missing = sorted(read_kaldi_map(train / "wav.scp"))[:2]
    for utt in missing:
        (root / read_kaldi_map(train / "wav.scp")[utt]).unlink()
    trials = root / "T8-5/data/libri_dev_trials_f_T8-5"
    utt, path = sorted(read_kaldi_map(trials / "wav.scp").items())[0]
    audio, rate = soundfile.read(root / path, dtype="float32")
    audio[1000:1010] = np.nan
    soundfile.write(root / path, audio, rate, subtype="FLOAT")
    return root, missing, utt


# id -> what the case runs and the fragments its one error line must hold (the table is built in `cases`).
CASE_IDS = [
    "train: system with no folder, into an existing folder",
    "train: a data folder that is not there",
    "train: a misspelt key",
    "train: a misspelt evaluation key",
    "train: an alignment missing, found after data preparation in a new folder",
    "train: seed out of range",
    "train: a key given twice",
    "train: a required key left out",
    "train: layer lists that do not fit",
    "train: output_folder is a file",
    "train: output_folder under a file",
    "train: audio_check_cache is a folder",
    "train: audio_check_cache under a file",
    "train: alignment cache missing, into an existing folder",
    "train: hyperparams.yaml of a started run deleted",
    "train: mode none into a concat run",
    "train: other settings into a started run",
    "train: audio problems in a new output folder",
    "train: a second trainer into a folder in use",
    "train: an empty training manifest",
    "train: an init_from folder whose hyperparams.yaml would run code",
    "train: init_freeze_epochs freezing every epoch",
    "train: an empty init_from",
    "train: a pooled system with no data folder",
    "evaluate: truncated embedding_model.ckpt",
    "evaluate: an evaluation option out of range",
    "evaluate: model of another size",
    "evaluate: NaN embedding under check_audio header",
    "evaluate: audio problems in a new eval folder",
    "evaluate: a model folder of other n_mels than --n_mels",
    "evaluate: a model folder's hyperparams.yaml without embedding_model",
    "evaluate: a second evaluation into an eval folder in use",
    "evaluate: an empty enrolls list",
    "evaluate: a model folder whose hyperparams.yaml would run code",
    "evaluate: an AS-norm cohort of one utterance",
    "align: output under a file",
    "align: a misspelt key",
    "align: shard 3/2",
    "align: no data_folder",
    "align: a second aligner on the same shard",
    "align: an empty CSV manifest",
    "compute_orders: semantic with a Whisper model it cannot load",
    "compute_orders: stale orders on a rerun",
    "anonymize: output is the input",
    "anonymize: output_folder under a file",
    "run_grid: output_folder is a file",
    "run_grid: a seed out of range",
    "run_grid: a second grid runner on its output folder",
    "run_grid: DAST rows without a DAST folder",
]


@pytest.fixture(scope="module")
def table(vpac_root, tmp_path_factory):
    """Every case's recipe, argv, expected fragments and watched folders, then all of them run."""
    world = tmp_path_factory.mktemp("user-errors")
    a_file = world / "a_file"
    a_file.write_text("not a folder")
    a_dir = world / "a_dir"
    a_dir.mkdir()
    broken, missing, nan_utt = broken_copy(vpac_root, world / "broken")
    train = [f"--data_folder={vpac_root}", "--system=T8-5", *TINY]
    evaluate = [f"--data_folder={vpac_root}", "--system=T8-5", *TINY]

    def new(name):  # an empty parent: that nothing is created under it shows in its digest
        parent = world / name
        parent.mkdir()
        return parent

    existing = new("existing")
    started = started_run(world / "started", train)
    no_settings = started_run(world / "no-settings", train)
    (no_settings / "hyperparams.yaml").unlink()
    concat = started_run(world / "concat", train)
    cut = exported_model(world / "cut")
    model = cut / "export" / "embedding_model.ckpt"
    model.write_bytes(model.read_bytes()[:1000])
    other_size = exported_model(world / "other-size")
    nan_run = exported_model(world / "nan-run")
    eval_problems = exported_model(world / "eval-problems")
    sizes = {"n_mels": 80, "channels": [16, 16, 16, 16, 48], "attention_channels": 8, "lin_neurons": 16}
    hub, _ = hub_folder(world / "spkrec-ecapa-voxceleb", sizes)
    encoder_only = world / "encoder-only"
    encoder_only.mkdir()
    (encoder_only / "hyperparams.yaml").write_text(
        VPC_YAML.format(**sizes).replace("embedding_model", "encoder")
    )
    # Model folders whose hyperparams.yaml would write <folder>/ran when built: the folder's digest shows it.
    hostile_init, _, init_line = hostile(hub_folder(world / "hostile-init", sizes)[0], "embedding_model")
    hostile_eval, _, eval_line = hostile(hub_folder(world / "hostile-eval", sizes)[0])
    locked = new("locked")
    lock = open(locked / ".cache.jsonl.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a first aligner is writing this shard
    stale = new("stale")
    alignments = load_alignments(vpac_root / "alignments" / "T8-5.jsonl")
    utt = alignments.ids[0]
    record = order_record(
        utt,
        [0],
        strategy="semantic",
        options={"context": "segment"},
        alignments=alignments,
        segment_policy="authors",
    )
    (stale / "orders.jsonl").write_text(record + "\n")
    anon = world / "anon"
    shutil.copytree(vpac_root / "T8-5/data/libri_dev_enrolls_T8-5", anon)
    enroll = vpac_root / "T8-5/data/libri_dev_enrolls_T8-5"
    grid = [f"--data_folder={vpac_root}"]
    problems_parent = new("problems")
    # Folders another run is writing (probe 2 of issue 32): the lock a first trainer, evaluation or grid holds.
    busy_train, busy_eval, busy_grid = (
        new("busy-train"),
        exported_model(world / "busy-eval"),
        new("busy-grid"),
    )
    partial = world / "partial.jsonl"  # every training utterance's alignment but one
    lines = (vpac_root / "alignments" / "T8-5.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    partial.write_text("".join(lines[1:]), encoding="utf-8")
    # Empty lists (probe 7): each named, with the fix.
    empty = new("empty")
    (empty / "train.csv").write_text("ID,utt_id,wav,duration,spk_id\n")
    (empty / "align.csv").write_text("ID,duration,wav,text\n")
    no_enrolls = world / "no-enrolls"
    shutil.copytree(vpac_root / "T8-5", no_enrolls / "T8-5")
    (no_enrolls / "T8-5/data/libri_dev_enrolls_T8-5/enrolls").write_text("")
    empty_enrolls_run = exported_model(world / "empty-enrolls-run")
    one_cohort = exported_model(world / "one-cohort")
    holders = [
        lock_folder(busy_train, "a training run"),
        lock_folder(busy_eval / "eval", "an evaluation"),
        lock_folder(busy_grid, "a grid run", GRID_LOCK),
    ]

    specs = {
        "train: system with no folder, into an existing folder": (
            "train", [f"--data_folder={vpac_root}", "--system=NOPE", *TINY, f"--output_folder={existing}"],
            ["system 'NOPE' not found"], [existing]),
        "train: a data folder that is not there": (
            "train", [f"--data_folder={world}/nowhere", "--system=T8-5", *TINY, f"--output_folder={new('nowhere')}/out"],
            [f"{world}/nowhere"], [world / "nowhere"]),
        "train: a misspelt key": (
            "train", [*train, f"--output_folder={new('misspelt')}/out", "--sytem=T8-5"],
            ["--sytem", "did you mean --system?"], [world / "misspelt"]),
        "train: a misspelt evaluation key": (
            "train", [*train, f"--output_folder={new('misspelt-eval')}/out", "--eval_subset=[dev_f]"],
            ["--eval_subset", "did you mean --eval_subsets?"], [world / "misspelt-eval"]),
        "train: an alignment missing, found after data preparation in a new folder": (
            "train", [*train, f"--output_folder={new('partial')}/out", f"--alignment_cache={partial}"],
            ["have no alignment"], [world / "partial"]),
        "train: seed out of range": (
            "train", [*train, f"--output_folder={new('seed')}/out", "--seed=-1"],
            ["option seed: -1: input should be greater than or equal to 0"], [world / "seed"]),
        "train: a key given twice": (
            "train", [*train, f"--output_folder={new('twice')}/out", "--seed=1", "--seed=2"],
            ["--seed is given twice (1, then 2): give it once"], [world / "twice"]),
        "train: a required key left out": (
            "train", [*TINY, f"--output_folder={new('required')}/out"],
            ["--data_folder is required"], [world / "required"]),
        "train: layer lists that do not fit": (
            "train", args(train, f"--output_folder={new('layers')}/out", "--channels=[16,16,48]"),
            ["channels, kernel_sizes and dilations", "got 3, 5 and 5"], [world / "layers"]),
        "train: output_folder is a file": (
            "train", [*train, f"--output_folder={a_file}"],
            [f"output_folder: '{a_file}' is a file, not a folder"], [a_file]),
        "train: output_folder under a file": (
            "train", [*train, f"--output_folder={a_file}/out"],
            [f"output_folder: '{a_file}/out' lies under '{a_file}', which is a file"], [a_file]),
        "train: audio_check_cache is a folder": (
            "train", [*train, f"--output_folder={new('cache-dir')}/out", f"--audio_check_cache={a_dir}"],
            [f"audio_check_cache: '{a_dir}' is a folder, not a file"], [world / "cache-dir", a_dir]),
        "train: audio_check_cache under a file": (
            "train", [*train, f"--output_folder={new('cache-file')}/out", f"--audio_check_cache={a_file}/c.jsonl"],
            [f"audio_check_cache: '{a_file}/c.jsonl' lies under '{a_file}'"], [world / "cache-file", a_file]),
        "train: alignment cache missing, into an existing folder": (
            "train", [*train, f"--output_folder={existing}", f"--alignment_cache={world}/none.jsonl"],
            [f"{world}/none.jsonl: alignment cache", "not found"], [existing]),
        "train: hyperparams.yaml of a started run deleted": (
            "train", [*train, f"--output_folder={no_settings}"],
            [f"{no_settings}/hyperparams.yaml: missing or damaged", f"remove {no_settings}/save to start over"],
            [no_settings]),
        "train: mode none into a concat run": (
            "train", [*train, f"--output_folder={concat}", "--mode=none"],
            ["mode: 'concat' there, 'none' now", "--output_folder"], [concat]),
        "train: other settings into a started run": (
            "train", [*train, f"--output_folder={started}", "--crossfade=0.005"],
            ["crossfade: 0.0 there, 0.005 now"], [started]),
        "train: audio problems in a new output folder": (
            "train", [f"--data_folder={broken}", "--system=T8-5", *TINY, f"--output_folder={problems_parent}/out/run"],
            ["2 of 24 audio files failed the audio check", f"{problems_parent}/out.audio_problems.txt",
             f"{missing[0]} "], [broken]),
        "train: a second trainer into a folder in use": (
            "train", [*train, f"--output_folder={busy_train}"],
            [f"{busy_train} is in use by a training run (pid {os.getpid()}, since ", "wait for it to finish"],
            [busy_train]),
        "train: an empty training manifest": (
            "train", [*train, f"--output_folder={new('empty-manifest')}/out", "--skip_prep=True",
                      f"--train_annotation={empty / 'train.csv'}", f"--valid_annotation={empty / 'train.csv'}"],
            [f"{empty / 'train.csv'}: no rows after the header"], [empty, world / "empty-manifest"]),
        "train: an init_from folder whose hyperparams.yaml would run code": (
            "train", [*train, f"--output_folder={new('hostile-init-run')}/out", f"--init_from={hostile_init}"],
            [f"{hostile_init}/hyperparams.yaml:{init_line}: the tag !apply:pathlib.Path.write_text", "--trusted=True"],
            [hostile_init, world / "hostile-init-run"]),
        "train: init_freeze_epochs freezing every epoch": (
            "train", [*train, f"--output_folder={new('frozen-run')}/out", f"--init_from={hub}", "--init_freeze_epochs=5"],
            ["--init_freeze_epochs=5 freezes every one of the 1 epochs", "below number_of_epochs"],
            [hub, world / "frozen-run"]),
        "train: an empty init_from": (
            "train", [*train, f"--output_folder={new('empty-init')}/out", "--init_from="],
            ["--init_from is empty", "leave --init_from out"], [world / "empty-init"]),
        "train: a pooled system with no data folder": (
            "train", [*train, f"--output_folder={new('pooled-b9')}/out", "--train_systems=[B9]"],
            ["train_systems: system 'B9' has no training set", "system 'B9' not found"], [world / "pooled-b9"]),
        "evaluate: truncated embedding_model.ckpt": (
            "evaluate", [*evaluate, f"--output_folder={cut}"],
            [f"{model}: cannot be read (model checkpoint), the file is damaged or cut", "recipes/train.py"], [cut]),
        "evaluate: an evaluation option out of range": (
            "evaluate", [*evaluate, f"--output_folder={new('eval-option')}/out", "--eval_bootstrap_resamples=-1"],
            ["option eval_bootstrap_resamples: -1: input should be greater than or equal to 0"],
            [world / "eval-option"]),
        "evaluate: model of another size": (
            "evaluate", args(evaluate, f"--output_folder={other_size}", "--channels=[32,32,32,32,96]"),
            ["the export has channels=[16, 16, 16, 16, 48]", "embedding_model channels=[32, 32, 32, 32, 96]"],
            [other_size]),
        "evaluate: NaN embedding under check_audio header": (
            "evaluate", [f"--data_folder={broken}", "--system=T8-5", *TINY, f"--output_folder={nan_run}",
                         "--check_audio=header", f"--audio_check_cache={world}/scratch/check.jsonl"],
            ["NaN or infinite embedding", nan_utt, "check_audio: full"], [nan_run, broken]),
        "evaluate: audio problems in a new eval folder": (
            "evaluate", [f"--data_folder={broken}", "--system=T8-5", *TINY, f"--output_folder={eval_problems}",
                         f"--audio_check_cache={world}/scratch/check.jsonl"],
            ["1 of 24 enrollment and trial files failed", f"{eval_problems}/eval.audio_problems.txt",
             f"{nan_utt} "], [broken]),
        "evaluate: a model folder of other n_mels than --n_mels": (
            "evaluate", [*evaluate, f"--output_folder={new('n-mels')}/out", f"--eval_model_folder={hub}", "--n_mels=40"],
            [f"{hub}/hyperparams.yaml: its model has n_mels=80", "--n_mels=40 was given"], [hub, world / "n-mels"]),
        "evaluate: a model folder's hyperparams.yaml without embedding_model": (
            "evaluate", [*evaluate, f"--output_folder={new('encoder-only-run')}/out", f"--eval_model_folder={encoder_only}"],
            [f"{encoder_only}/hyperparams.yaml: no embedding_model key"], [encoder_only, world / "encoder-only-run"]),
        "evaluate: a second evaluation into an eval folder in use": (
            "evaluate", [*evaluate, f"--output_folder={busy_eval}"],
            [f"{busy_eval / 'eval'} is in use by an evaluation (pid {os.getpid()}, since "], [busy_eval]),
        "evaluate: an empty enrolls list": (
            "evaluate", [f"--data_folder={no_enrolls}", "--system=T8-5", *TINY, f"--output_folder={empty_enrolls_run}"],
            [f"{no_enrolls}/T8-5/data/libri_dev_enrolls_T8-5/enrolls: empty", "remove the file"],
            [no_enrolls, empty_enrolls_run]),
        "evaluate: a model folder whose hyperparams.yaml would run code": (
            "evaluate", [*evaluate, f"--output_folder={new('hostile-eval-run')}/out", f"--eval_model_folder={hostile_eval}"],
            [f"{hostile_eval}/hyperparams.yaml:{eval_line}: the tag !apply:pathlib.Path.write_text", "--trusted=True"],
            [hostile_eval, world / "hostile-eval-run"]),
        "evaluate: an AS-norm cohort of one utterance": (
            "evaluate", [*evaluate, f"--output_folder={one_cohort}", "--eval_score_norm=as-norm-voxattack",
                         "--eval_cohort_size=1", "--eval_cohort_min_size=0"],
            ["eval_score_norm: as-norm-voxattack needs at least 2 cohort scores per side", "gives a cohort of 1;"],
            [one_cohort]),
        "align: output under a file": (
            "align", [f"--data_folder={enroll}", f"--output={a_file}/cache.jsonl"],
            [f"output: '{a_file}/cache.jsonl' lies under '{a_file}'"], [a_file]),
        "align: a misspelt key": (
            "align", [f"--data_folder={enroll}", f"--outptu={new('outptu')}/cache.jsonl"],
            ["--outptu", "did you mean --output?"], [world / "outptu"]),
        "align: shard 3/2": (
            "align", [f"--data_folder={enroll}", f"--output={new('shard')}/cache.jsonl", "--shard=3/2"],
            ["option shard: '3/2': input should be 'i/n' with 0 <= i < n"], [world / "shard"]),
        "align: no data_folder": (
            "align", [f"--output={new('no-data')}/cache.jsonl"],
            ["--data_folder=<Kaldi folder or CSV manifest> is required"], [world / "no-data"]),
        "align: a second aligner on the same shard": (
            "align", [f"--data_folder={enroll}", f"--output={locked}/cache.jsonl"],
            [f"{locked}/cache.jsonl: another process is writing this shard"], [locked]),
        "align: an empty CSV manifest": (
            "align", [f"--data_folder={empty / 'align.csv'}", f"--output={new('empty-align')}/cache.jsonl"],
            [f"{empty / 'align.csv'}: no rows after the header"], [empty, world / "empty-align"]),
        "compute_orders: semantic with a Whisper model it cannot load": (
            "orders", [f"--data_folder={vpac_root}", "--strategy=semantic", f"--orders_cache={new('sr')}/sr.jsonl",
                       "--whisper_model=segreconcat-tests/no-such-whisper"],
            ["segreconcat-tests/no-such-whisper: ", "pass a local model folder (--whisper_model=<folder>)"],
            [world / "sr"]),
        "compute_orders: stale orders on a rerun": (
            "orders", [f"--data_folder={vpac_root}", "--strategy=acoustic", f"--orders_cache={stale}/orders.jsonl"],
            [f"{stale}/orders.jsonl: 1 cached order(s) were computed with other", "write to a new output"], [stale]),
        "anonymize: output is the input": (
            "anonymize", [f"--input_folder={anon}", f"--output_folder={anon}"],
            ["output folder is the input folder; refusing to overwrite the input"], [anon]),
        "anonymize: output_folder under a file": (
            "anonymize", [f"--input_folder={anon}", f"--output_folder={a_file}/anon"],
            ["lies under"], [anon, a_file]),
        "run_grid: output_folder is a file": (
            "grid", [*grid, f"--output_folder={a_file}"], ["output_folder: ", "is a file, not a folder"], [a_file]),
        "run_grid: a seed out of range": (
            "grid", [*grid, f"--output_folder={new('grid')}/out", "--seeds=[-1]"],
            ["option seeds: [-1]: item 0 input should be greater than or equal to 0"], [world / "grid"]),
        "run_grid: a second grid runner on its output folder": (
            "grid", [*grid, f"--output_folder={busy_grid}", "--systems=[B3]"],
            [f"{busy_grid} is in use by a grid run (pid {os.getpid()}, since "], [busy_grid]),
        "run_grid: DAST rows without a DAST folder": (
            "attackers", [*grid, f"--output_folder={new('dast-grid')}/out", f"--init_from={world}",
                          "--dast_rows=[dast_ft,dast_ft_concat]"],
            ["dast_rows: ['dast_ft', 'dast_ft_concat'] fine-tune DAST's Stage II model, but dast_folder is null",
             "--dast_folder=<folder"], [world / "dast-grid"]),
    }  # fmt: skip
    assert list(specs) == CASE_IDS
    hparams = {
        "train": HPARAMS, "evaluate": HPARAMS, "align": REPO / "hparams/align.yaml",
        "orders": REPO / "hparams/orders.yaml", "anonymize": REPO / "hparams/anonymize.yaml",
        "grid": REPO / "hparams/grid.yaml", "attackers": REPO / "hparams/attackers.yaml",
    }  # fmt: skip
    cases = [
        {
            "recipe": "grid" if recipe == "attackers" else recipe,  # run_grid.py on hparams/attackers.yaml
            "argv": [str(hparams[recipe]), *argv],
            "watch": [str(p) for p in watch],
            "cwd": str(world),
        }
        for recipe, argv, _, watch in specs.values()
    ]
    (world / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path]), "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, str(REPO / "tests" / "forked_recipes.py"), world / "cases.json", world / "results.json"],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        lock.close()
        for holder in holders:
            holder.close()
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((world / "results.json").read_text())
    return {
        case_id: {"recipe": spec[0], "fragments": spec[2], **result, "world": world, "missing": missing}
        for (case_id, spec), result in zip(specs.items(), results)
    }


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_each_user_error_is_one_line_exit_2_and_changes_nothing(table, case_id):
    case = table[case_id]
    shown = f"{case_id}\nstdout: {case['stdout'][-1500:]}\nstderr: {case['stderr'][-3000:]}"
    assert case["returncode"] == 2, shown
    assert "Traceback" not in case["stderr"] + case["stdout"], shown
    lines = [line for line in case["stderr"].splitlines() if line.strip()]
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and lines[-1] == errors[0], shown  # one line, the last one printed
    (line,) = errors
    assert line.startswith(f"{SCRIPTS[case['recipe']]}: error: "), shown
    for fragment in case["fragments"]:
        assert fragment in line, (fragment, line)
    assert case["changed"] == [], (case["changed"], line)  # a refused run changes nothing on disk


def test_a_file_the_message_cites_outlives_the_removed_folder(table):
    # Training into a new folder: the folder goes, its list of bad audio files is kept beside it.
    world = table["train: audio problems in a new output folder"]["world"]
    kept = world / "problems" / "out.audio_problems.txt"
    assert not (world / "problems" / "out").exists()
    listed = kept.read_text().splitlines()
    assert [line.split()[0] for line in listed] == table["train: audio problems in a new output folder"][
        "missing"
    ]
    assert all(": missing (no such file)" in line for line in listed)
    # Evaluation into a new eval/ folder of an existing run: eval/ goes, its list stays beside it.
    run = world / "eval-problems"
    assert sorted(path.name for path in run.iterdir()) == ["eval.audio_problems.txt", "export"]
    assert ": nonfinite (10 NaN or infinite samples)" in (run / "eval.audio_problems.txt").read_text()


def test_run_main_keeps_cited_files_and_says_where(tmp_path, monkeypatch, capsys):
    from segreconcat_aug.errors import cite

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "new" / "run"

    class Refused(UserError, ValueError):
        pass

    def main(argv):
        cli.note_new_folder(out)
        out.mkdir(parents=True)
        (out / "log.txt").write_text("work of this run")
        (out / "problems.txt").write_text("u1 a.wav: missing\n")
        (tmp_path / "new.problems.txt").write_text("an earlier run's list")  # not overwritten
        raise cite(Refused(f"1 file is bad (all listed in {out / 'problems.txt'})"), out / "problems.txt")

    monkeypatch.setattr(cli.logging, "shutdown", lambda: None)  # pytest's own log handlers stay open
    with pytest.raises(SystemExit) as stop:
        cli.run_main(main, [])
    assert stop.value.code == 2 and not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.problems.1.txt", "new.problems.txt"]
    assert (tmp_path / "new.problems.1.txt").read_text() == "u1 a.wav: missing\n"
    assert (tmp_path / "new.problems.txt").read_text() == "an earlier run's list"
    message = capsys.readouterr().err.strip()
    assert message.endswith(f"(all listed in {tmp_path / 'new.problems.1.txt'})")


def test_an_internal_error_keeps_its_traceback_and_the_folders(tmp_path, monkeypatch):
    out = tmp_path / "new"

    def main(argv):
        cli.note_new_folder(out)
        out.mkdir()
        raise ZeroDivisionError("a bug, not the user's mistake")

    with pytest.raises(ZeroDivisionError, match="a bug"):  # not a one-line exit 2: the traceback stays
        cli.run_main(main, [])
    assert out.is_dir()  # left for the post-mortem


def test_the_traceback_flag_shows_a_user_error_with_its_traceback(tmp_path):
    out = tmp_path / "new"

    class Refused(UserError, ValueError):
        pass

    def main(argv):
        assert "--traceback" not in argv  # the flag is the entry point's, not the recipe's
        cli.note_new_folder(out)
        out.mkdir()
        raise Refused("a user error")

    with pytest.raises(Refused, match="a user error"):  # raised as it is, not one line and exit 2
        cli.run_main(main, ["--traceback"])
    assert not out.exists()  # its new folders are removed all the same


def test_a_training_yaml_still_holding_an_eval_key_is_refused_naming_evaluate_yaml(tmp_path):
    from segreconcat_aug.errors import OptionError
    from segreconcat_aug.options import TrainingOptions

    own = tmp_path / "my_training.yaml"
    own.write_text(HPARAMS.read_text() + "eval_subsets: [dev_f]\n")
    out = tmp_path / "out"
    with pytest.raises(OptionError, match=r"my_training.yaml: eval_subsets: .*hparams/evaluate.yaml"):
        cli.check_options([str(own), f"--data_folder={tmp_path}", f"--output_folder={out}"], TrainingOptions)
    assert not out.exists()

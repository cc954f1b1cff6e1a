"""recipes/train.py on the tiny VPAC layout: training, early stopping, resume, DDP, bad inputs."""

import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile
import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml
from speechbrain.utils.checkpoints import Checkpointer

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data.convergence import CONVERGENCE_FILE
from segreconcat_aug.data.vpac import VPACLayoutError
from segreconcat_aug.method.augment import MissingAlignmentError, SegReConcat
from segreconcat_aug.training.data_prep import (
    AudioCheckError,
    DataPrepError,
    PrepOptions,
    prepare_vpac_training,
)
from segreconcat_aug.training.manifest import read_manifest
from segreconcat_aug.training.pipeline import TrainAudioPipeline
from segreconcat_aug.training.run_settings import (
    EXPERIMENT_HPARAMS,
    CheckpointDamagedError,
    RunSettingsError,
    check_run_settings,
    has_checkpoints,
    saved_hparams,
)

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "train.py"
HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"
TINY = [
    "--channels=[16,16,16,16,48]",
    "--lin_neurons=16",
    "--attention_channels=8",
    "--batch_size=8",
    "--num_workers=0",
    "--sentence_len=2.0",
    "--dev_ratio=0.1",
    "--check_workers=2",
    "--device=cpu",
    "--evaluate_after_training=False",
]
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _load_recipe():
    spec = importlib.util.spec_from_file_location("train_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as a script's __main__: SpeechBrain copies the recipe that ran
    spec.loader.exec_module(module)
    return module


train_recipe = _load_recipe()


def _args(root, out, *extra, system="T8-5"):
    return [
        str(HPARAMS),
        f"--data_folder={root}",
        f"--system={system}",
        f"--output_folder={out}",
        *[arg for arg in TINY if arg.split("=")[0] not in {e.split("=")[0] for e in extra}],
        *extra,
    ]


def _epochs(out):
    path = Path(out) / "epochs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _train_rows(out):
    with open(Path(out) / "train.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture
def scripted_dev_loss(monkeypatch):
    """Replace the dev loss of epoch e by ``losses[e]`` (training itself stays real)."""
    losses = {}
    original = train_recipe.SpeakerBrain.compute_objectives

    def compute_objectives(self, predictions, batch, stage):
        loss = original(self, predictions, batch, stage)
        if stage == sb.Stage.VALID:
            return torch.tensor(losses[self.hparams.epoch_counter.current])
        return loss

    monkeypatch.setattr(train_recipe.SpeakerBrain, "compute_objectives", compute_objectives)
    return losses


def test_two_epochs_keep_and_export_the_best_dev_loss_model(vpac_root, tmp_path):
    out = tmp_path / "out"
    torch.set_num_threads(1)
    train_recipe.main(
        _args(vpac_root, out, "--number_of_epochs=2", "--warmup=0", "--evaluate_after_training=True")
    )
    epochs = _epochs(out)
    assert [e["epoch"] for e in epochs] == [1, 2]
    rows = len(_train_rows(out))
    for epoch in epochs:
        assert epoch["train"]["samples"] == rows - rows % 8  # drop_last: no batch of one crop
        assert epoch["train"]["augmented"] == epoch["train"]["samples"]  # every crop went through SegReConcat
        assert epoch["train"]["samples_per_s"] > 0
    losses = [e["valid"]["loss"] for e in epochs]
    best = Checkpointer(out / "save").find_checkpoint(min_key="loss")
    assert best.meta["loss"] == min(losses)
    info = json.loads((out / "export" / "export_info.json").read_text())
    assert info["dev_loss"] == min(losses) and info["epoch"] == 1 + losses.index(min(losses))

    # The export holds the best checkpoint's weights, and the training YAML as run.
    exported = torch.load(out / "export" / "embedding_model.ckpt")
    saved = torch.load(best.paramfiles["embedding_model"])
    assert exported.keys() == saved.keys() and all(torch.equal(exported[k], saved[k]) for k in saved)
    with open(out / "export" / "train_hyperparams.yaml") as fin:
        trained = load_hyperpyyaml(fin)
    speakers = {row["spk_id"] for row in _train_rows(out)}
    assert trained["n_speakers"] == len(speakers)
    _check_export_loads_in_speechbrain(out / "export", tmp_path, vpac_root, speakers)
    # The run's folder keeps a copy of the recipe that ran, not of the module that made the folder.
    assert (out / "train.py").read_bytes() == RECIPE.read_bytes() and not (out / "cli.py").exists()
    assert "Installed Python packages:" in (out / "env.log").read_text()  # SpeechBrain's env.log
    # Training ended by evaluating the export on every dev/test subset (recipes/evaluate.py's work).
    results = json.loads((out / "eval" / "results.json").read_text())
    assert set(results["subsets"]) == {"dev_f", "dev_m", "test_f", "test_m"}
    # Its report carries the run's convergence (written at the end of training, beside the export).
    found = json.loads((out / "export" / CONVERGENCE_FILE).read_text())
    assert results["convergence"] == found == json.loads((out / CONVERGENCE_FILE).read_text())
    assert found["best_epoch"] == info["epoch"] and found["last_epoch"] == 2 and found["limit"] == 2
    assert ("best_epoch_last" in [flag["name"] for flag in found["flags"]]) == (info["epoch"] == 2)
    assert "## Convergence of the attacker's training" in (out / "eval" / "results.md").read_text()


def _check_export_loads_in_speechbrain(export, tmp_path, vpac_root, speakers):
    """SpeechBrain's EncoderClassifier (as SpeechBrain and the VPC 2024 toolkit load speaker models) loads a
    moved copy of the export and embeds as evaluation.py does; its label encoder is the training's."""
    from speechbrain.inference.speaker import EncoderClassifier

    from segreconcat_aug.data.audio import read_audio
    from segreconcat_aug.evaluation.embeddings import EmbeddingExtractor
    from segreconcat_aug.models.folder import load_bare_checkpoint

    moved = tmp_path / "moved" / "asv_anon_ecapa"  # the folder works wherever it is copied to
    shutil.copytree(export, moved)
    encoder = EncoderClassifier.from_hparams(
        source=str(moved), savedir=str(tmp_path / "sb_savedir"), run_opts={"device": "cpu"}
    )
    assert set(encoder.hparams.label_encoder.lab2ind) == speakers

    with open(HPARAMS) as fin:
        overrides = {"data_folder": str(vpac_root), "output_folder": str(tmp_path / "unused")}
        tiny = {"channels": [16, 16, 16, 16, 48], "lin_neurons": 16, "attention_channels": 8}
        hparams = load_hyperpyyaml(fin, {**overrides, **tiny, "n_speakers": len(speakers)})
    load_bare_checkpoint(hparams, moved)
    extractor = EmbeddingExtractor(
        hparams["compute_features"], hparams["mean_var_norm"], hparams["embedding_model"]
    )
    # Two real utterances of different lengths: one batch, zero-padded, with relative lengths.
    files = sorted((vpac_root / "T8-5/data/libri_dev_trials_f_T8-5/wav").glob("*.wav"))[:2]
    signals = [read_audio(path) for path in files]
    assert len(signals[0]) != len(signals[1])
    ours = extractor.embed_batch([str(path) for path in files])  # normalize_wave off: the same waveforms
    longest = max(len(wave) for wave in signals)
    batch = torch.zeros(len(signals), longest)
    for row, wave in enumerate(signals):
        batch[row, : len(wave)] = torch.from_numpy(wave)
    lengths = torch.tensor([len(wave) / longest for wave in signals])
    theirs = encoder.encode_batch(batch, lengths).squeeze(1).numpy()
    assert theirs.shape == ours.shape == (2, 16)
    assert abs(theirs - ours).max() < 1e-5
    assert abs(ours[0] - ours[1]).max() > 1e-3  # two utterances, two embeddings: the comparison has teeth


def test_early_stopping_after_patience_keeps_the_lowest_loss(vpac_root, tmp_path, scripted_dev_loss):
    # Epoch 1 is warm-up: its loss counts for the kept checkpoint, not for the stopper.
    scripted_dev_loss.update({1: 1.0, 2: 5.0, 3: 4.0, 4: 4.5, 5: 4.6, 6: 3.0, 7: 3.0, 8: 3.0})
    out = tmp_path / "out"
    train_recipe.main(_args(vpac_root, out, "--number_of_epochs=8", "--warmup=1", "--patience=2"))
    epochs = _epochs(out)
    # Best after warm-up at epoch 3; epochs 4 and 5 do not improve: patience 2 is spent.
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4, 5]
    assert [e["should_stop"] for e in epochs] == [False] * 4 + [True]
    assert epochs[-1]["best_epoch"] == 3
    info = json.loads((out / "export" / "export_info.json").read_text())
    assert (info["epoch"], info["dev_loss"]) == (1, 1.0)
    # Stopped early on a rising dev loss, every crop augmented: no convergence flag (issue 31).
    found = json.loads((out / CONVERGENCE_FILE).read_text())
    assert found["flags"] == [] and found["stopped_early"] and found["best_epoch"] == 1
    assert found["dev_loss_slope"] > 0 and found["relative_gap"] < 0
    assert (
        found["coverage"]["fell_back"] == 0
        and found["coverage"]["augmented"] == epochs[-1]["train"]["samples"]
    )


def test_select_by_dev_eer_keeps_and_exports_the_lowest_dev_eer(
    vpac_root, tmp_path, scripted_dev_loss, monkeypatch
):
    from segreconcat_aug.training.dev_eer import DevEER, DevTrialsError

    scripted_dev_loss.update({1: 1.0, 2: 2.0, 3: 3.0})  # the dev loss would pick epoch 1
    eers, computed = {1: 30.0, 2: 10.0, 3: 20.0}, []
    original = DevEER.eer

    def scripted_eer(self):
        computed.append(original(self))  # the real one runs on the epoch's dev embeddings
        return eers[len(computed)]

    monkeypatch.setattr(DevEER, "eer", scripted_eer)
    out = tmp_path / "out"
    # dev_ratio 0.5: some speakers keep two dev utterances (a target trial); 0.1 keeps one, and is refused.
    with pytest.raises(DevTrialsError, match="^select_by: dev_eer: the dev split .* raise dev_ratio"):
        train_recipe.main(_args(vpac_root, tmp_path / "one", "--number_of_epochs=1", "--select_by=dev_eer"))
    train_recipe.main(
        _args(
            vpac_root, out, "--number_of_epochs=3", "--patience=5", "--select_by=dev_eer", "--dev_ratio=0.5"
        )
    )
    assert len(computed) == 3 and all(0 <= value <= 100 for value in computed)
    assert [e["valid"]["dev_eer"] for e in _epochs(out)] == [30.0, 10.0, 20.0]
    info = json.loads((out / "export" / "export_info.json").read_text())
    assert (info["epoch"], info["selected_by"], info["dev_eer"], info["dev_loss"]) == (
        2,
        "dev_eer",
        10.0,
        2.0,
    )
    assert json.loads((out / CONVERGENCE_FILE).read_text())["selected_by"] == "dev_eer"


def test_dev_eer_is_speechbrains_eer_on_a_balanced_list_of_the_dev_rows():
    from segreconcat_aug.evaluation.metrics import eer
    from segreconcat_aug.training.dev_eer import DevEER

    rows = [(f"{s}-{u}@{c}", f"{s}-{u}", s) for s in "abcdef" for u in range(3) for c in range(2)]
    dev = DevEER(rows, seed=4)
    assert dev.targets.sum() == (~dev.targets).sum() > 0
    utterance = {row: utt for row, utt, _ in rows}
    assert all(utterance[a] != utterance[b] for a, b in zip(dev.a, dev.b))  # never two crops of one utterance
    assert DevEER(rows, seed=4).a == dev.a  # fixed by the seed
    vectors = {row: torch.randn(1, 4) + 2 * (ord(row[0]) % 3) for row, _, _ in rows}
    for row, vector in vectors.items():
        dev.add([row], vector)
    scores = torch.nn.functional.cosine_similarity(
        torch.cat([vectors[a] for a in dev.a]), torch.cat([vectors[b] for b in dev.b])
    ).numpy()
    expected = 100 * eer(scores[dev.targets], scores[~dev.targets]).eer
    assert dev.eer() == pytest.approx(expected, abs=1e-4)


def test_killed_run_resumes_with_its_epoch_and_patience(vpac_root, tmp_path, scripted_dev_loss):
    out = tmp_path / "out"
    command = [sys.executable, str(RECIPE), *_args(vpac_root, out, "--number_of_epochs=50", "--warmup=0")]
    command.append("--patience=3")
    process = subprocess.Popen(command, env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while len(_epochs(out)) < 2:  # a line is written once its epoch's checkpoint is saved
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "training did not reach epoch 2"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    latest = Checkpointer(out / "save").find_checkpoint()  # what a restart recovers
    with open(latest.paramfiles["counter"]) as handle:
        state = load_hyperpyyaml(handle)
    current, best_epoch = state["current_epoch"], state["best_epoch"]
    assert current >= 2 and 1 <= best_epoch <= current and current - best_epoch < 3

    # Restart: every later dev loss is worse, so the run must stop 3 epochs after the SAVED
    # best epoch (a run that forgot its patience would start counting again).
    scripted_dev_loss.update(dict.fromkeys(range(current + 1, 51), state["best_score"] + 1.0))
    train_recipe.main(_args(vpac_root, out, "--number_of_epochs=50", "--warmup=0", "--patience=3"))
    resumed = [e for e in _epochs(out) if e["epoch"] > current]
    assert [e["epoch"] for e in resumed] == list(range(current + 1, best_epoch + 3 + 1))
    assert resumed[-1]["should_stop"] and resumed[-1]["best_epoch"] == best_epoch
    assert json.loads((out / "export" / "export_info.json").read_text())["epoch"] == best_epoch


def test_ddp_two_cpu_processes_complete(vpac_root, tmp_path):
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(RECIPE),
        *_args(vpac_root, out, "--number_of_epochs=1", "--distributed_backend=gloo"),
    ]  # fmt: skip
    done = subprocess.run(command, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (epoch,) = _epochs(out)
    per_process = len(_train_rows(out)) // 2  # each process gets half the rows, full batches of 8
    # Counts and samples summed over both processes.
    assert epoch["train"]["samples"] == 2 * (per_process - per_process % 8)
    assert epoch["train"]["augmented"] == epoch["train"]["samples"]
    assert (out / "export" / "embedding_model.ckpt").is_file()


def test_bad_inputs_stop_before_training(vpac_root, tmp_path):
    with pytest.raises(VPACLayoutError, match="system 'X1' not found"):
        train_recipe.main(_args(vpac_root, tmp_path / "a", system="X1"))
    # An alignment cache missing one training utterance: an error naming the count, before epoch 1.
    partial = tmp_path / "partial.jsonl"
    lines = (vpac_root / "alignments" / "T8-5.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    partial.write_text("".join(lines[1:]), encoding="utf-8")
    args = _args(vpac_root, tmp_path / "b", f"--alignment_cache={partial}", "--number_of_epochs=1")
    with pytest.raises(MissingAlignmentError, match=r"1 of \d+ training utterances have no alignment"):
        train_recipe.main(args)
    assert _epochs(tmp_path / "b") == []
    # A batch larger than the training set would train on nothing (drop_last): refused.
    with pytest.raises(DataPrepError, match="no full batch of 512"):
        train_recipe.main(_args(vpac_root, tmp_path / "d", "--batch_size=512", "--mode=none"))
    # A missing audio file: data preparation names it.
    root = tmp_path / "vpac"
    shutil.copytree(vpac_root / "T8-5", root / "T8-5")
    victim = sorted((root / "T8-5/data/train-clean-360_T8-5/wav").glob("*.wav"))[0]
    victim.unlink()
    with pytest.raises(AudioCheckError, match=f"{victim.stem} .*missing"):
        train_recipe.main(_args(root, tmp_path / "c", "--mode=none"))


def test_recipe_train_set_in_a_worker_dataloader_gives_augmented_crops(vpac_root, tmp_path):
    out = tmp_path / "out"
    prepare_vpac_training(vpac_root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1))
    augmenter = SegReConcat(load_alignments(vpac_root / "alignments" / "T8-5.jsonl"), crossfade=0.0)
    # 60 s crops keep the whole augmented signal, so its length shows SegReConcat at work.
    train_audio = TrainAudioPipeline(augmenter, sentence_len=60.0, seed=5)
    train_audio.set_epoch(1)
    hparams = {"train_annotation": out / "train.csv", "valid_annotation": out / "dev.csv", "save_folder": out}
    train_data, _, encoder = train_recipe.dataio_prep(hparams, train_audio, read_manifest(out / "train.csv"))
    loader = sb.dataio.dataloader.make_dataloader(train_data, batch_size=4, num_workers=2)
    rows = {row["ID"]: row for row in _train_rows(out)}
    seen = 0
    for batch in loader:
        lengths = (batch.sig.lengths * batch.sig.data.shape[1]).round().long()
        for row_id, length, label in zip(batch.id, lengths, batch.spk_id_encoded.data):
            original = soundfile.info(rows[row_id]["wav"]).frames
            assert length == 2 * original  # the original followed by its rearrangement
            assert encoder.decode_ndim(label) == [rows[row_id]["spk_id"]]
            seen += 1
    assert seen == len(rows)
    assert train_audio.counts()["augmented"] == len(rows)  # counted inside the workers


def test_specaugment_is_applied_to_training_batches_only(tmp_path):
    with open(HPARAMS) as fin:
        overrides = {"data_folder": str(tmp_path), "output_folder": str(tmp_path), "specaug": True}
        hparams = load_hyperpyyaml(fin, {**overrides, "channels": [8, 8, 8, 8, 24], "n_speakers": 3})
    calls = []
    spec_augment = hparams["spec_augment"]

    def recording(feats, lens):
        calls.append(feats.shape)
        return spec_augment(feats, lens)

    hparams["spec_augment"] = recording
    brain = train_recipe.SpeakerBrain(
        modules=hparams["modules"],
        hparams=hparams,
        run_opts={"device": "cpu"},
        train_audio=TrainAudioPipeline(),
    )
    batch = sb.dataio.batch.PaddedBatch([{"id": str(k), "sig": torch.randn(16000)} for k in range(2)])
    brain.compute_forward(batch, sb.Stage.VALID)
    assert calls == []
    brain.compute_forward(batch, sb.Stage.TRAIN)
    assert len(calls) == 1 and calls[0][-1] == 80  # on the Fbank features, batch side


def test_table1_rows_are_reachable_by_override(tmp_path, monkeypatch):
    # The default output folders are relative (results/...) and the checkpointer creates its folder
    # when the YAML is loaded: from the temporary folder, not the checkout.
    monkeypatch.chdir(tmp_path)
    rows = {
        "No Augmentation": {"mode": "none"},
        "SpecAug": {"mode": "none", "specaug": True},
        "RR": {"mode": "rearranged"},
        "RR + Concatenation": {},
        "RR + Concatenation + SpecAug": {"specaug": True},
        "AR + Concatenation": {"strategy": "acoustic"},
        "SR": {"strategy": "semantic", "mode": "rearranged"},
    }
    folders = set()
    for overrides in rows.values():
        with open(HPARAMS) as fin:
            base = {"data_folder": str(tmp_path), "channels": [8, 8, 8, 8, 24]}
            hparams = load_hyperpyyaml(fin, {**base, **overrides})
        for key, value in overrides.items():
            assert hparams[key] == value
        assert hparams["save_folder"].startswith(hparams["output_folder"])
        assert hparams["orders_cache"].endswith(f"T8-5-{hparams['strategy']}.jsonl")
        assert hparams["embedding_model"].blocks[0].conv.conv.out_channels == 8
        folders.add(hparams["output_folder"])
    assert len(folders) == len(rows)  # each configuration trains in its own folder


def test_a_rerun_with_other_method_settings_does_not_resume_the_folder(vpac_root, tmp_path):
    out = tmp_path / "out"
    train_recipe.main(_args(vpac_root, out, "--number_of_epochs=1"))
    # One epoch: the best epoch is the last (issue 31); one dev loss gives no slope.
    found = json.loads((out / CONVERGENCE_FILE).read_text())
    names = [flag["name"] for flag in found["flags"]]
    assert "best_epoch_last" in names and "dev_loss_falling" not in names
    assert found["dev_loss_slope"] is None
    saved = saved_hparams(out)  # SpeechBrain's hyperparams.yaml: what the rerun is checked against
    assert saved["crossfade"] == 0.0 and saved["rr_redraw"] == "once" and saved["segment_policy"] == "authors"
    # (log.txt aside: in this one process the first run's log handler is still attached.)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "log.txt"}
    # experiment_name does not name the crossfade: the same folder, another method. Refused, untouched.
    with pytest.raises(RunSettingsError, match=r"crossfade: 0\.0 there, 0\.005 now.*--output_folder"):
        train_recipe.main(_args(vpac_root, out, "--number_of_epochs=2", "--crossfade=0.005"))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "log.txt"} == before
    # More epochs of the same run are a resume, not another run.
    check_run_settings({**saved, "output_folder": str(out), "number_of_epochs": 3, "patience": 9})
    # A checkpoint cut by a crash mid-save: that resume is refused in one line, before anything is written.
    newest = max((out / "save").glob("CKPT+*"), key=lambda folder: folder.stat().st_mtime)
    victim = newest / "embedding_model.ckpt"
    victim.write_bytes(victim.read_bytes()[:1000])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "log.txt"}
    with pytest.raises(CheckpointDamagedError, match=rf"^{re.escape(str(victim))}: cut short \(1000 bytes"):
        train_recipe.main(_args(vpac_root, out, "--number_of_epochs=2"))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "log.txt"} == before


def test_settings_refuse_a_rerun_only_where_checkpoints_are(vpac_root, tmp_path):
    """Issue 22: a run that stopped before training (a bad option, no full batch) holds no settings, and
    a folder without checkpoints never refuses the corrected rerun; one with checkpoints does."""
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataPrepError, match="no full batch of 512"):
        train_recipe.main(_args(vpac_root, out, "--batch_size=512", "--mode=none"))
    assert (out / "train.csv").is_file()  # data preparation ran; training did not start
    assert not has_checkpoints(out / "save")
    other = {"output_folder": str(out), "mode": "concat", "crossfade": 0.005, "system": "B3"}
    assert saved_hparams(out)["mode"] == "none"  # the YAML that run started with
    check_run_settings(other)  # no checkpoints: nothing to resume
    Checkpointer(out / "save", {"model": torch.nn.Linear(1, 1)}).save_checkpoint(meta={"loss": 1.0})
    with pytest.raises(
        RunSettingsError, match=r"crossfade: 0\.0 there, 0\.005 now.*mode: 'none' there, 'concat' now"
    ):
        check_run_settings(other)
    (out / EXPERIMENT_HPARAMS).unlink()
    with pytest.raises(RunSettingsError, match=f"{out / EXPERIMENT_HPARAMS}: missing or damaged"):
        check_run_settings(other)


def test_a_label_encoder_without_checkpoints_is_made_afresh(vpac_root, tmp_path):
    out = tmp_path / "out"
    prepare_vpac_training(vpac_root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1, mode="none"))
    hparams = {"train_annotation": out / "train.csv", "valid_annotation": out / "dev.csv", "save_folder": out}
    stale = sb.dataio.encoder.CategoricalEncoder()
    stale.update_from_iterable(["someone", "else"])
    stale.save(out / "label_encoder.txt")  # left by a run on other data that stopped before training
    rows = read_manifest(out / "train.csv")
    # No checkpoint uses that file.
    _, _, encoder = train_recipe.dataio_prep(hparams, TrainAudioPipeline(), rows)
    assert set(encoder.lab2ind) == {row["spk_id"] for row in _train_rows(out)}
    stale.save(out / "label_encoder.txt")
    Checkpointer(out, {"model": torch.nn.Linear(1, 1)}).save_checkpoint(meta={"loss": 1.0})
    with pytest.raises(DataPrepError, match="lists other speakers"):
        train_recipe.dataio_prep(hparams, TrainAudioPipeline(), rows)


def test_a_run_still_improving_carries_every_convergence_flag(vpac_root, tmp_path, scripted_dev_loss):
    """Issue 31: a dev loss falling to the last epoch, far above the training loss, and a training
    utterance SegReConcat passed through (no alignment): all four flags, beside the checkpoints and the export."""
    scripted_dev_loss.update({1: 60.0, 2: 50.0, 3: 40.0})
    partial = tmp_path / "partial.jsonl"
    lines = (vpac_root / "alignments" / "T8-5.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    partial.write_text("".join(lines[1:]), encoding="utf-8")
    out = tmp_path / "out"
    train_recipe.main(
        _args(
            vpac_root,
            out,
            f"--alignment_cache={partial}",
            "--missing_alignment=passthrough",
            "--number_of_epochs=3",
            "--warmup=0",
            "--patience=3",
        )
    )
    found = json.loads((out / CONVERGENCE_FILE).read_text())
    assert found == json.loads((out / "export" / CONVERGENCE_FILE).read_text())
    assert [flag["name"] for flag in found["flags"]] == [
        "best_epoch_last",
        "dev_loss_falling",
        "train_dev_gap",
        "augmentation_fallback",
    ]
    assert (found["best_epoch"], found["last_epoch"], found["stopped_early"]) == (3, 3, False)
    assert found["dev_loss_slope"] == pytest.approx((40.0 / 60.0) ** 0.5 - 1)  # -18 % per epoch
    last = _epochs(out)[-1]["train"]
    assert found["relative_gap"] == pytest.approx((40.0 - last["loss"]) / last["loss"])
    coverage = found["coverage"]
    assert coverage["reasons"]["missing_alignment"] >= 1 and coverage["augmented"] >= 1
    assert coverage["augmented"] + coverage["fell_back"] == last["samples"]

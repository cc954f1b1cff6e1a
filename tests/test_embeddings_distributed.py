"""Evaluation's embedding extraction shared across the ranks of a torchrun job equals one process's."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "librispeech"

# Each process builds the same tiny model (seeded), embeds the fixture's utterances into its own cache and,
# under torchrun, its share of them; rank 0 saves what embed() returned.
SCRIPT = """
import sys, numpy as np, torch
from pathlib import Path
from speechbrain.lobes.features import Fbank
from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
from speechbrain.processing.features import InputNormalization
from segreconcat_aug.evaluation import embeddings
from segreconcat_aug.evaluation.embeddings import EmbeddingExtractor

out, cache, padded = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "padded"
if "RANK" in __import__("os").environ:
    torch.distributed.init_process_group("gloo")
    if sys.argv[5] == "late" and torch.distributed.get_rank() == 1:
        # rank 1 reads the cache only after rank 0 has written its first shard
        load = embeddings.EmbeddingCache.load
        embeddings.EmbeddingCache.load = lambda self: (__import__("time").sleep(3), load(self))[1]
torch.manual_seed(0)
model = ECAPA_TDNN(80, channels=[16, 16, 16, 16, 48], attention_channels=8, lin_neurons=16)
extractor = EmbeddingExtractor(
    Fbank(n_mels=80), InputNormalization(norm_type="sentence", std_norm=False), model,
    batch_size=2, padded=padded, save_every=1,
)
wav = {p.stem: str(p) for p in sorted(Path(sys.argv[4]).glob("*.flac"))[:5]}
found = extractor.embed(wav, cache)
if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
    np.savez(out, ids=np.array(list(found)), vectors=np.stack(list(found.values())))
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
"""


def _run(tmp_path, name, batching, ranks=None, timing="together"):
    script = tmp_path / "embed.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    launcher = (
        [] if ranks is None else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    )
    out, cache = tmp_path / f"{name}.npz", tmp_path / f"cache-{name}"
    done = subprocess.run(
        [sys.executable, *launcher, str(script), str(out), str(cache), batching, str(FIXTURE), timing],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as saved:
        return saved["ids"].tolist(), saved["vectors"], sorted(p.name for p in cache.glob("shard-*.npz"))


@pytest.mark.parametrize(
    ("batching", "timing"), [("exact", "together"), ("padded", "together"), ("exact", "late")]
)
def test_two_ranks_embed_what_one_process_does(tmp_path, batching, timing):
    """Also when one rank reads the cache after the other has written to it (``late``)."""
    ids, vectors, shards = _run(tmp_path, "one", batching)
    shared_ids, shared, rank_shards = _run(tmp_path, "two", batching, ranks=2, timing=timing)
    assert shared_ids == ids
    np.testing.assert_array_equal(shared, vectors)
    assert all("-rank" not in name for name in shards)
    # each rank wrote its own shards of the cache
    assert {name.split("-rank")[1] for name in rank_shards} == {"0.npz", "1.npz"}


def test_two_ranks_evaluate_as_one_process(vpac_root, tmp_path):
    """``torchrun recipes/evaluate.py``: the ranks share the extraction, rank 0 alone scores and writes."""
    from test_evaluation import HPARAMS, export_random_model, load_tiny_hparams, tiny_overrides

    overrides = tiny_overrides(vpac_root, tmp_path / "run")
    export_random_model(load_tiny_hparams(overrides))
    args = [f"--{key}={value}".replace(" ", "") for key, value in overrides.items()]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    folders = {}
    for name, launcher in (
        ("one", []),
        ("two", ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]),
    ):
        folders[name] = tmp_path / name
        command = [sys.executable, *launcher, str(REPO / "recipes" / "evaluate.py"), str(HPARAMS), *args]
        command += ["--device=cpu", "--distributed_backend=gloo", f"--eval_folder={folders[name]}"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        # rank 0 alone prints the table
        assert done.stdout.count("| dev F | dev M | dev avg | test F | test M | test avg | avg |") == 1
    one, two = folders["one"], folders["two"]
    scores = sorted(path.name for path in (one / "scores").iterdir())
    assert scores and scores == sorted(path.name for path in (two / "scores").iterdir())
    for name in scores:
        assert (two / "scores" / name).read_bytes() == (one / "scores" / name).read_bytes(), name
    for name in ("results.csv", "results.md"):
        assert (two / name).read_text(encoding="utf-8") == (one / name).read_text(encoding="utf-8"), name
    # each rank embedded its share into its own shards of the cache
    shards = {path.name.split("-rank")[-1] for path in two.glob("embeddings/*/*/shard-*.npz")}
    assert shards == {"0.npz", "1.npz"}

"""The console scripts run the checkout's recipes, from any directory."""

import subprocess
import sys
from pathlib import Path

from segreconcat_aug.alignment import load_alignments
from segreconcat_aug.cli import REPO

SCRIPTS = Path(sys.executable).parent


def test_segreconcat_align_imports_a_ctm_from_another_directory(tmp_path):
    (tmp_path / "a.ctm").write_text("u1 1 0.1 0.3 hi\nu1 1 0.4 0.2 there\nu2 1 0.2 0.2 yo\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wav.scp").write_text("u1 a.wav\nu2 b.wav\n")
    (tmp_path / "data" / "utt2dur").write_text("u1 1.5\nu2 2.0\n")
    command = [
        str(SCRIPTS / "segreconcat-align"),
        str(REPO / "hparams" / "align.yaml"),
        "--backend=ctm",
        f"--import_from={tmp_path / 'a.ctm'}",
        f"--data_folder={tmp_path / 'data'}",
        "--output=out.jsonl",
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    index = load_alignments(tmp_path / "out.jsonl", keep_words=True)
    assert [w.word for w in index.get("u1").words] == ["hi", "there"]
    assert index.aligners == ["ctm", "ctm"]


def test_every_console_script_names_an_existing_recipe():
    import configparser

    from segreconcat_aug import cli

    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    entries = [
        line.split("=") for line in config["options.entry_points"]["console_scripts"].split("\n") if line
    ]
    assert len(entries) == len(cli.RECIPES)
    for script, target in entries:
        name = target.strip().rsplit(":", 1)[1]
        assert script.strip() == f"segreconcat-{name}"
        assert (REPO / "recipes" / cli.RECIPES[name]).is_file()

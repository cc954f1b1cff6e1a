"""The console scripts run the checkout's recipes from any directory; --help; user errors as one line."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from segreconcat_aug import cli
from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.cli import REPO

SCRIPTS = Path(sys.executable).parent


def _eol_comments(yaml_file) -> dict[str, str]:
    """key -> its end-of-line comment, read from the YAML text (what --help must show)."""
    found = {}
    for line in Path(yaml_file).read_text().splitlines():
        match = re.match(r"^([A-Za-z]\w*):.*?\s#\s*(.+)$", line)
        if match and "'" not in line and '"' not in line:
            found[match.group(1)] = match.group(2).strip()
    return found


def test_segreconcat_align_imports_a_ctm_from_another_directory(tmp_path):
    (tmp_path / "a.ctm").write_text("u1 1 0.1 0.3 hi\nu1 1 0.4 0.2 there\nu2 1 0.2 0.2 yo\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wav.scp").write_text("u1 a.wav\nu2 b.wav\n")
    (tmp_path / "data" / "utt2dur").write_text("u1 1.5\nu2 2.0\n")
    command = [
        str(SCRIPTS / "segreconcat-align"),
        "hparams/align.yaml",  # the README's relative path, from another directory: the checkout's file
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
        assert (REPO / "recipes" / cli.RECIPES[name][0]).is_file()


@pytest.mark.parametrize("name", sorted(cli.RECIPES))
def test_help_lists_the_yaml_keys_with_their_comments_then_usage(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as stop:
        cli.run_recipe(name, ["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    yaml_file = REPO / cli.DEFAULT_HPARAMS[cli.RECIPES[name][0]]
    keys_section = text.split(f"Keys of {yaml_file}")[1].split("\n\n")[0]
    shown = dict(re.findall(r"^  --(\w+) +(.*)$", keys_section, flags=re.M))
    assert set(shown) == {key for key, _, _ in cli.yaml_lines(yaml_file) if not key.startswith("__")}
    comments = _eol_comments(yaml_file)
    assert comments, yaml_file
    for key, comment in comments.items():
        assert shown[key].endswith(comment), (key, shown[key], comment)
    assert text.index("usage:") > text.index(f"--{next(iter(shown))}")  # keys first, then usage
    assert f"recipes/{cli.RECIPES[name][0]}" in text.split("usage:")[1]


def test_console_script_help_from_another_directory(tmp_path):
    for script in ("segreconcat-demo", "segreconcat-train"):
        done = subprocess.run(
            [str(SCRIPTS / script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "--output_folder" in done.stdout and "usage:" in done.stdout
    assert "--quick" in done.stdout or "--data_folder" in done.stdout


def test_checkout_path_prefers_what_exists_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.checkout_path("hparams/align.yaml") == str(REPO / "hparams" / "align.yaml")
    (tmp_path / "hparams").mkdir()
    (tmp_path / "hparams" / "align.yaml").write_text("output: x\n")  # the user's own file wins
    assert cli.checkout_path("hparams/align.yaml") == "hparams/align.yaml"
    assert cli.checkout_path("hparams/none.yaml") == "hparams/none.yaml"


def test_the_experiment_log_keeps_no_jit_debug_trace(tmp_path):
    """numba logs every bytecode step of a compile at DEBUG; SpeechBrain's log file takes DEBUG."""
    import logging

    import speechbrain as sb

    root = logging.getLogger()
    before = list(root.handlers)
    try:
        for name in cli.QUIET_LOGGERS:  # what check_options does before a recipe makes its folder
            logging.getLogger(name).setLevel(logging.WARNING)
        sb.create_experiment_directory(tmp_path / "exp", None, None)
        logging.getLogger("numba.core.byteflow").debug("bytecode dump: pending deque")
        logging.getLogger("segreconcat_aug.training.progress").info("epoch 1 done")
        for handler in root.handlers:
            handler.flush()
        log = (tmp_path / "exp" / "log.txt").read_text()
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
            handler.close()
    assert "epoch 1 done" in log and "bytecode dump" not in log

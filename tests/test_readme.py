"""The README's Python example runs as written, from the repository root."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_python_examples_run(monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    assert blocks, "the README shows the pipeline on a real utterance"
    monkeypatch.chdir(REPO)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    # "<utt>@0 torch.Size([48000]) augmented=1": a 3 s crop of the augmented utterance.
    assert re.search(r"@0 torch\.Size\(\[48000\]\) augmented=1", printed), printed

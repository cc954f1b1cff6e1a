"""Every option a message names is one the user can set (issue 32, probe 7).

A hint that names a key the YAML does not have sends the user looking for it: an error once said
``skip_missing_trials skips such trials``, where the key is ``eval_skip_missing_trials``. Every string of
every ``raise`` and log call in the package and the recipes is read from the source: a ``--key`` must be
a key of one of the ``hparams/*.yaml`` files (or a recipe's own flag), and a bare ``snake_case`` word
that is a key's tail or extends one (``skip_missing_trials`` for ``eval_skip_missing_trials``) is a key
spelt wrong.
"""

import ast
import re
from pathlib import Path

import ruamel.yaml

REPO = Path(__file__).resolve().parents[1]
#: Flags the recipes take that are no YAML key (and the placeholder of "--key=value").
RECIPE_FLAGS = {"help", "traceback", "quick", "table1", "attackers", "key"}
#: Names in messages that are fields of other files, not options (a WavLM checkpoint's cfg), or a
#: library argument not yet in any YAML (ecapa_ssl's ssl_input, until a recipe selects the model).
NOT_OPTIONS = {"extractor_mode"}


def yaml_keys() -> set[str]:
    """Every key of every hparams/*.yaml, nested mappings included (strategy options, overrides)."""
    keys: set[str] = set()

    def walk(node):
        if hasattr(node, "items"):
            for key, value in node.items():
                keys.add(str(key))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in (REPO / "hparams").glob("*.yaml"):
        walk(ruamel.yaml.YAML().load(path.read_text(encoding="utf-8")))
    return keys


def _texts(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.JoinedStr):  # an f-string: its literal parts, a placeholder between them
            yield "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in sub.values)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def messages(paths=None):
    """``(file:line, text)`` of every string in a ``raise`` or a logger/warnings call."""
    paths = paths or sorted([*(REPO / "segreconcat_aug").rglob("*.py"), *(REPO / "recipes").glob("*.py")])
    for path in paths:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                found = node.exc
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in (
                "warning",
                "error",
                "warn",
            ):
                found = node
            else:
                continue
            for text in _texts(found):
                yield f"{Path(path).name}:{node.lineno}", text


def wrong_keys(found, keys) -> list[str]:
    """Where a message names a key that does not exist, as ``where: key (did you mean ...)``."""
    flags = keys | RECIPE_FLAGS
    tails: dict[str, set[str]] = {}  # "skip_missing_trials" -> {"eval_skip_missing_trials"}
    for key in keys:
        parts = key.split("_")
        for start in range(1, len(parts)):
            tails.setdefault("_".join(parts[start:]), set()).add(key)
    wrong = []
    for where, text in found:
        for match in re.finditer(r"(?<![\w-])--([a-z][a-z0-9_]*)", text):
            if match.group(1) not in flags:
                wrong.append(f"{where}: --{match.group(1)}")
        for match in re.finditer(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b", text):
            word = match.group(1)
            if word in keys or word in NOT_OPTIONS:
                continue
            parts = word.split("_")
            extended = {"_".join(parts[start:]) for start in range(1, len(parts))} & keys  # a key, prefixed
            near = sorted(tails.get(word, set()) | extended)
            if near:
                wrong.append(f"{where}: {word} (did you mean {', '.join(near)}?)")
    return sorted(set(wrong))


def test_every_key_a_message_names_is_in_the_yaml():
    found = list(messages())
    assert len(found) > 500  # the scan reads the messages (about a thousand)
    assert wrong_keys(found, yaml_keys()) == []


def test_the_check_finds_a_misspelt_key(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text(
        "def f(path):\n"
        "    raise ValueError(f'{path}: unknown speaker (skip_missing_trials skips such trials)')\n"
        "def g(log):\n"
        "    log.warning('set --eval_skip_missing=True')\n"
    )
    assert wrong_keys(messages([source]), yaml_keys()) == [
        "bad.py:2: skip_missing_trials (did you mean eval_skip_missing_trials?)",
        "bad.py:4: --eval_skip_missing",
    ]

"""A recipe YAML naming ``base_hparams`` holds only what differs from that file (hparams/ecapa_ssl_segreconcat.yaml).

Its keys replace the base's whole (HyperPyYAML's overrides would merge a nested ``!new:`` entry into
the base's and keep the base's class); a key the base lacks goes after the one before it in this file,
so the objects are built in the order the file gives.
"""

from __future__ import annotations

import io
from pathlib import Path

BASE_KEY = "base_hparams"
NULL = "tag:yaml.org,2002:null"  # written as null, as the files have it (ruamel writes nothing)


def hparams_text(path) -> str:
    """The YAML text of ``path``, composed over its ``base_hparams`` file (beside it) when it names one."""
    import ruamel.yaml

    text = Path(path).read_text(encoding="utf-8")
    yaml = ruamel.yaml.YAML()
    yaml.width = 4096  # a long !ref stays on its line
    yaml.representer.add_representer(type(None), lambda dumper, _: dumper.represent_scalar(NULL, "null"))
    own = yaml.load(text)
    if not isinstance(own, dict) or BASE_KEY not in own:
        return text
    composed = yaml.load(hparams_text(Path(path).parent / own.pop(BASE_KEY)))
    position = 0
    for key, value in own.items():
        if key in composed:
            composed[key] = value
            position = list(composed).index(key) + 1
        else:
            composed.insert(position, key, value)
            position += 1
    stream = io.StringIO()
    yaml.dump(composed, stream)
    return stream.getvalue()

"""Which tags a model folder's ``hyperparams.yaml`` may hold before it is loaded: HyperPyYAML calls
what its tags name, so a folder's YAML is code, and only a speaker model's modules are allowed
unless the user trusts the folder (``--trusted=True``).

>>> check_model_text("model: !new:torch.nn.Linear {in_features: !ref <n>, out_features: 2}", "a.yaml")
>>> check_model_text("x: 1\\nrun: !apply:os.system [ls]", "a.yaml")
Traceback (most recent call last):
...
segreconcat_aug.models.trust.UntrustedModelError: a.yaml:2: the tag !apply:os.system would run code when the model is loaded, and a model folder's YAML may only build a speaker model's modules; pass --trusted=True if you trust the folder
>>> check_model_text("run: !apply:os.system [ls]", "a.yaml", trusted=True)
"""

from __future__ import annotations

from ..errors import UserError

#: ``!new:`` / ``!name:`` targets a speaker model needs, by exact dotted name.
ALLOWED_CLASSES = frozenset(
    {
        "speechbrain.lobes.features.Fbank",
        "speechbrain.processing.features.InputNormalization",
        "speechbrain.utils.parameter_transfer.Pretrainer",
        "speechbrain.dataio.encoder.CategoricalEncoder",
    }
)
#: ``!new:`` / ``!name:`` targets allowed by package (``torch.nn.``: its layers, one name below it).
ALLOWED_PREFIXES = ("speechbrain.lobes.models.", "segreconcat_aug.models.")
#: ``!apply:`` targets allowed: VPC 2024's ASV folders seed torch (evaluation keeps its own random state).
ALLOWED_CALLS = frozenset({"torch.manual_seed"})
#: HyperPyYAML's tags that build nothing.
PLAIN_TAGS = frozenset({"!ref", "!copy", "!tuple", "!PLACEHOLDER"})
#: YAML's own types (``tag:yaml.org,2002:<type>``); ``python/...`` and the like are refused.
YAML_TYPES = frozenset({"str", "int", "float", "bool", "null", "map", "seq", "merge", "timestamp", "binary"})


class UntrustedModelError(UserError, PermissionError):
    """A model folder's YAML names code beyond a speaker model's modules, and the folder is not trusted."""


def allowed_tag(tag: str) -> bool:
    """Whether a tag may stand in an untrusted model folder's YAML.

    >>> [allowed_tag(tag) for tag in ("!new:torch.nn.Linear", "!new:torch.nn.utils.x", "!name:os.system")]
    [True, False, False]
    """
    if tag in PLAIN_TAGS or tag.startswith("!PLACEHOLDER"):
        return True
    if tag.startswith("tag:yaml.org,2002:"):
        return tag[len("tag:yaml.org,2002:") :] in YAML_TYPES
    kind, _, target = tag.partition(":")
    if kind == "!apply":
        return target in ALLOWED_CALLS
    if kind not in ("!new", "!name"):
        return False
    if target in ALLOWED_CLASSES or target.startswith(ALLOWED_PREFIXES):
        return True
    layer = target.removeprefix("torch.nn.")
    return layer != target and layer.isidentifier() and layer[:1].isupper()


def check_model_text(text: str, source, *, trusted: bool = False) -> None:
    """Refuse (:class:`UntrustedModelError`) the first tag of ``text`` that :func:`allowed_tag` does not
    allow, unless ``trusted``. Text that is not YAML passes: the reader that follows says what is wrong."""
    if trusted:
        return
    import ruamel.yaml

    try:
        root = ruamel.yaml.YAML(typ="rt").compose(text)
    except ruamel.yaml.YAMLError:
        return
    seen, stack = set(), [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:  # an alias is the node it names
            continue
        seen.add(id(node))
        tag = str(getattr(node.tag, "value", node.tag))
        if not allowed_tag(tag):
            raise UntrustedModelError(
                f"{source}:{node.start_mark.line + 1}: the tag {tag} would run code when the model is loaded, "
                "and a model folder's YAML may only build a speaker model's modules; pass --trusted=True if "
                "you trust the folder"
            )
        if isinstance(node.value, list):
            for child in reversed(node.value):  # in the file's order
                stack.extend(reversed(child) if isinstance(child, tuple) else [child])

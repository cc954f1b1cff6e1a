"""WavLM as the VPC 2026 attacker uses it: frozen, in eval mode, the output of each transformer layer.

The challenge's ``WavLM-Large.pt`` is in microsoft/unilm's format (``{"cfg", "model"}``); we run the
same network through transformers' ``WavLMModel``, its config and parameter names mapped from
unilm's (``tests/test_wavlm.py`` holds the outputs to unilm's forward).

The toolkit feeds its ECAPA unilm's layer results 1..L (``ret_layer_results=True``): each transformer
layer's raw output, without a pre-LN model's final LayerNorm and without a padding mask.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from .state_dicts import CheckpointError, check_fits, read_torch_file, tensor_mapping

#: unilm ``WavLMConfig`` defaults of the keys that decide the network (a checkpoint's ``cfg`` may omit
#: any of them; unilm then uses these).
UNILM_DEFAULTS = {
    "extractor_mode": "default",
    "encoder_layers": 12,
    "encoder_embed_dim": 768,
    "encoder_ffn_embed_dim": 3072,
    "encoder_attention_heads": 12,
    "activation_fn": "gelu",
    "layer_norm_first": False,
    "conv_feature_layers": "[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2",
    "conv_bias": False,
    "normalize": False,
    "conv_pos": 128,
    "conv_pos_groups": 16,
    "relative_position_embedding": False,
    "num_buckets": 320,
    "max_distance": 1280,
    "gru_rel_pos": False,
}
#: WavLM-Large's config (the challenge's ``WavLM-Large.pt``), for building a randomly initialized
#: model of the real size (benchmarks) without the file.
WAVLM_LARGE = {
    **UNILM_DEFAULTS,
    "extractor_mode": "layer_norm",
    "encoder_layers": 24,
    "encoder_embed_dim": 1024,
    "encoder_ffn_embed_dim": 4096,
    "encoder_attention_heads": 16,
    "layer_norm_first": True,
    "normalize": True,
    "relative_position_embedding": True,
    "max_distance": 800,
    "gru_rel_pos": True,
}
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which unilm's layers use

#: unilm parameter name -> transformers ``WavLMModel`` name; ``#`` is a layer index, a name continues
#: with ``.weight``/``.bias`` (or nothing). unilm's ``mask_emb`` (pretraining only) has no counterpart.
UNILM_TO_TRANSFORMERS = (
    ("feature_extractor.conv_layers.#.0", "feature_extractor.conv_layers.#.conv"),
    # extractor_mode layer_norm: a LayerNorm in every block; default: a GroupNorm in block 0 only
    ("feature_extractor.conv_layers.#.2.1", "feature_extractor.conv_layers.#.layer_norm"),
    ("feature_extractor.conv_layers.#.2", "feature_extractor.conv_layers.#.layer_norm"),
    ("layer_norm", "feature_projection.layer_norm"),
    ("post_extract_proj", "feature_projection.projection"),
    ("encoder.pos_conv.0.weight_g", "encoder.pos_conv_embed.conv.parametrizations.weight.original0"),
    ("encoder.pos_conv.0.weight_v", "encoder.pos_conv_embed.conv.parametrizations.weight.original1"),
    ("encoder.pos_conv.0", "encoder.pos_conv_embed.conv"),
    ("encoder.layer_norm", "encoder.layer_norm"),
    ("encoder.layers.#.self_attn.relative_attention_bias", "encoder.layers.#.attention.rel_attn_embed"),
    ("encoder.layers.#.self_attn.grep_linear", "encoder.layers.#.attention.gru_rel_pos_linear"),
    ("encoder.layers.#.self_attn.grep_a", "encoder.layers.#.attention.gru_rel_pos_const"),
    ("encoder.layers.#.self_attn.q_proj", "encoder.layers.#.attention.q_proj"),
    ("encoder.layers.#.self_attn.k_proj", "encoder.layers.#.attention.k_proj"),
    ("encoder.layers.#.self_attn.v_proj", "encoder.layers.#.attention.v_proj"),
    ("encoder.layers.#.self_attn.out_proj", "encoder.layers.#.attention.out_proj"),
    ("encoder.layers.#.self_attn_layer_norm", "encoder.layers.#.layer_norm"),
    ("encoder.layers.#.fc1", "encoder.layers.#.feed_forward.intermediate_dense"),
    ("encoder.layers.#.fc2", "encoder.layers.#.feed_forward.output_dense"),
    ("encoder.layers.#.final_layer_norm", "encoder.layers.#.final_layer_norm"),
)
UNILM_ONLY = ("mask_emb",)
#: How :class:`WavLMLayers` runs a layer (see there).
ATTENTION_PATHS = ("fused", "transformers")


class WavLMConfigError(CheckpointError):
    """A unilm WavLM config that transformers' WavLMModel cannot express, or a key of the wrong type."""


def parse_conv_layers(spec: str) -> list[tuple[int, int, int]]:
    """unilm's ``conv_feature_layers`` string, read without ``eval``: ``[(dim, kernel, stride), ...]``.

    >>> parse_conv_layers("[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2")[:2]
    [(512, 10, 5), (512, 3, 2)]
    """

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.List):
            return [value(item) for item in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(value(item) for item in node.elts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(ast.dump(node))

    try:
        layers = value(ast.parse(spec, mode="eval").body)
        if not layers or not all(isinstance(layer, tuple) and len(layer) == 3 for layer in layers):
            raise ValueError(spec)
    except (SyntaxError, ValueError, TypeError):
        raise WavLMConfigError(
            f"conv_feature_layers {spec!r}: not a list of (dim, kernel, stride) such as "
            '"[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2"'
        ) from None
    return layers


def full_unilm_config(cfg: Mapping, *, source="cfg") -> dict:
    """``cfg`` with unilm's defaults for the keys it omits (other keys, unilm's or fairseq's, are kept)."""
    if not isinstance(cfg, Mapping):
        raise WavLMConfigError(
            f"{source}: its 'cfg' is a {type(cfg).__name__}, not the dict of unilm's WavLMConfig"
        )
    return {**UNILM_DEFAULTS, **cfg}


def transformers_config(cfg: Mapping, *, source="cfg"):
    """The transformers ``WavLMConfig`` of the network a unilm ``cfg`` describes (dropouts 0: frozen).

    transformers' WavLM always has unilm's gated relative position bias, so a ``cfg`` without
    ``relative_position_embedding`` or ``gru_rel_pos`` (neither is WavLM as published) is refused.
    """
    from transformers import WavLMConfig

    cfg = full_unilm_config(cfg, source=source)
    for key, needed in (
        ("relative_position_embedding", True),
        ("gru_rel_pos", True),
        ("activation_fn", "gelu"),
    ):
        if cfg[key] != needed:
            raise WavLMConfigError(
                f"{source}: {key} is {cfg[key]!r}; transformers' WavLMModel computes only WavLM's "
                f"{key} {needed!r} (every published WavLM checkpoint has it)"
            )
    if cfg["extractor_mode"] not in ("default", "layer_norm"):
        raise WavLMConfigError(
            f"{source}: extractor_mode {cfg['extractor_mode']!r} is not 'default' or 'layer_norm'"
        )
    conv = parse_conv_layers(cfg["conv_feature_layers"])
    return WavLMConfig(
        conv_dim=[dim for dim, _, _ in conv],
        conv_kernel=[kernel for _, kernel, _ in conv],
        conv_stride=[stride for _, _, stride in conv],
        conv_bias=bool(cfg["conv_bias"]),
        feat_extract_norm="layer" if cfg["extractor_mode"] == "layer_norm" else "group",
        feat_extract_activation="gelu",
        hidden_size=int(cfg["encoder_embed_dim"]),
        num_hidden_layers=int(cfg["encoder_layers"]),
        num_attention_heads=int(cfg["encoder_attention_heads"]),
        intermediate_size=int(cfg["encoder_ffn_embed_dim"]),
        hidden_act="gelu",
        do_stable_layer_norm=bool(cfg["layer_norm_first"]),
        num_conv_pos_embeddings=int(cfg["conv_pos"]),
        num_conv_pos_embedding_groups=int(cfg["conv_pos_groups"]),
        num_buckets=int(cfg["num_buckets"]),
        max_bucket_distance=int(cfg["max_distance"]),
        layer_norm_eps=LAYER_NORM_EPS,
        hidden_dropout=0.0,
        activation_dropout=0.0,
        attention_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        apply_spec_augment=False,
        mask_time_prob=0.0,
        mask_feature_prob=0.0,
    )


def _pattern(template: str) -> re.Pattern:
    return re.compile(re.escape(template).replace("\\#", r"(\d+)") + r"((?:\.[A-Za-z_]\w*)*)")


def _rename(name: str, rules) -> str | None:
    for source, target in rules:
        match = source.fullmatch(name)
        if match:
            *index, rest = match.groups()
            return target.replace("#", index[0]) + rest if index else target + rest
    return None


_FORWARD = tuple((_pattern(u), t) for u, t in UNILM_TO_TRANSFORMERS)


def unilm_to_transformers(state: Mapping, *, projection_dims: tuple[int, int] | None = None) -> dict:
    """A unilm WavLM state dict under transformers' names (unknown names keep theirs, to be refused).

    unilm has no ``post_extract_proj`` when the convolutions' width is the model's; transformers always
    projects, so ``projection_dims`` ``(conv width, model width)`` (equal) adds the identity in its place.
    """
    mapped = {}
    for name, value in state.items():
        if name in UNILM_ONLY:
            continue
        new = _rename(name, _FORWARD)
        mapped[new if new is not None else name] = value
    if (
        projection_dims
        and projection_dims[0] == projection_dims[1]
        and "post_extract_proj.weight" not in state
    ):
        width = projection_dims[0]
        mapped["feature_projection.projection.weight"] = torch.eye(width)
        mapped["feature_projection.projection.bias"] = torch.zeros(width)
    return mapped


def transformers_to_unilm(state: Mapping, cfg: Mapping) -> dict:
    """A transformers WavLM state dict under unilm's names, for ``cfg``'s network (tests; tiny files)."""
    cfg = full_unilm_config(cfg)
    layer_norm = cfg["extractor_mode"] == "layer_norm"
    rules = [
        (_pattern(target), source)
        for source, target in UNILM_TO_TRANSFORMERS
        if not source.endswith(".2.1" if not layer_norm else ".#.2")
    ]
    unilm = {_rename(name, rules) or name: value for name, value in state.items()}
    conv_width = parse_conv_layers(cfg["conv_feature_layers"])[-1][0]
    if conv_width == cfg["encoder_embed_dim"]:  # unilm projects only between different widths
        unilm.pop("post_extract_proj.weight", None)
        unilm.pop("post_extract_proj.bias", None)
    unilm["mask_emb"] = torch.zeros(cfg["encoder_embed_dim"])
    return unilm


def layer_norm_waveforms(
    wavs: torch.Tensor, lengths: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """Each row layer-normalized over its own samples (``F.layer_norm`` of the unpadded row), padding 0.

    ``lengths`` are relative (SpeechBrain's convention); the toolkit normalizes each file alike.

    >>> rows = torch.tensor([[1.0, 2.0, 3.0, 0.0], [1.0, 3.0, 1.0, 3.0]])
    >>> layer_norm_waveforms(rows, torch.tensor([0.75, 1.0]))[0, 3].item() == 0
    True
    >>> bool(torch.allclose(layer_norm_waveforms(rows)[1], F.layer_norm(rows[1], (4,))))
    True
    """
    if lengths is None:
        return F.layer_norm(wavs, wavs.shape[-1:], eps=eps)
    counts = torch.round(lengths * wavs.shape[-1]).clamp(min=1).to(wavs.dtype)
    mask = (torch.arange(wavs.shape[-1], device=wavs.device)[None, :] < counts[:, None]).to(wavs.dtype)
    mean = (wavs * mask).sum(-1, keepdim=True) / counts[:, None]
    var = (((wavs - mean) * mask) ** 2).sum(-1, keepdim=True) / counts[:, None]
    return (wavs - mean) * torch.rsqrt(var + eps) * mask


def _gated_bias(attention, x: torch.Tensor, position_bias: torch.Tensor) -> torch.Tensor:
    """WavLM's gated relative position bias of one layer: ``(batch, heads, T, T)`` from its input ``x``."""
    batch, frames, _ = x.shape
    heads = attention.num_heads
    per_head = x.view(batch, frames, heads, -1).transpose(1, 2)
    gate_a, gate_b = torch.sigmoid(
        attention.gru_rel_pos_linear(per_head).view(batch, heads, frames, 2, 4).sum(-1)
    ).chunk(2, dim=-1)
    return (gate_a * (gate_b * attention.gru_rel_pos_const - 1.0) + 2.0) * position_bias


def _attention(attention, x: torch.Tensor, position_bias: torch.Tensor) -> torch.Tensor:
    """Self-attention of one WavLM layer through ``scaled_dot_product_attention`` (fused kernels)."""
    batch, frames, width = x.shape
    heads = attention.num_heads

    def split(projection):
        return projection(x).view(batch, frames, heads, -1).transpose(1, 2)

    query, key, value = split(attention.q_proj), split(attention.k_proj), split(attention.v_proj)
    mask = _gated_bias(attention, x, position_bias).to(query.dtype)  # under autocast: the projections' dtype
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return attention.out_proj(out.transpose(1, 2).reshape(batch, frames, width))


class WavLMLayers(torch.nn.Module):
    """A frozen transformers ``WavLMModel`` returning every transformer layer's output, ``(batch, layers,
    frames, dim)``, always in eval mode (the toolkit's WavLM is, in training too).

    ``normalize``: the network expects layer-normalized waveforms (the caller applies
    :func:`layer_norm_waveforms`). ``unilm_cfg``: the config it was built from (:func:`unilm_checkpoint`).
    ``attention``: ``"fused"`` or ``"transformers"``, the same values by two paths (docs/attackers-ssl.md).
    """

    def __init__(self, model, *, normalize: bool, unilm_cfg: Mapping, attention: str = "fused"):
        super().__init__()
        if attention not in ATTENTION_PATHS:
            raise ValueError(f"attention {attention!r}: one of {ATTENTION_PATHS}")
        self.model = model
        self.normalize = bool(normalize)
        self.attention = attention
        self.unilm_cfg = dict(unilm_cfg)
        self.model.requires_grad_(False)
        self.train(False)

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    def train(self, mode: bool = True):
        return super().train(False)

    def _fused_layer(self, layer, hidden: torch.Tensor, position_bias: torch.Tensor) -> torch.Tensor:
        if self.model.config.do_stable_layer_norm:  # pre-LN (WavLM-Large)
            hidden = hidden + _attention(layer.attention, layer.layer_norm(hidden), position_bias)
            return hidden + layer.feed_forward(layer.final_layer_norm(hidden))
        hidden = layer.layer_norm(hidden + _attention(layer.attention, hidden, position_bias))
        return layer.final_layer_norm(hidden + layer.feed_forward(hidden))

    def forward(self, wavs: torch.Tensor) -> torch.Tensor:
        model = self.model
        encoder = model.encoder
        with torch.no_grad():
            hidden = model.feature_extractor(wavs).transpose(1, 2)
            hidden = model.feature_projection(hidden)[0]
            hidden = hidden + encoder.pos_conv_embed(hidden)
            if not model.config.do_stable_layer_norm:  # post-LN WavLM normalizes before its layers
                hidden = encoder.layer_norm(hidden)
            outputs = []
            if self.attention == "fused":
                frames = hidden.shape[1]
                position_bias = encoder.layers[0].attention.compute_bias(frames, frames)[None]
                for layer in encoder.layers:
                    hidden = self._fused_layer(layer, hidden, position_bias)
                    outputs.append(hidden)
            else:
                position_bias = None
                for layer in encoder.layers:
                    returned = layer(hidden, attention_mask=None, position_bias=position_bias)
                    hidden, position_bias = returned[0], returned[1]  # (4.x returns more)
                    outputs.append(hidden)
            return torch.stack(outputs, dim=1)


def wavlm_from_unilm(checkpoint, *, source="WavLM checkpoint", attention: str = "fused") -> WavLMLayers:
    """:class:`WavLMLayers` from a unilm-format checkpoint dict (``cfg`` + ``model``), checked."""
    from transformers import WavLMModel

    if not isinstance(checkpoint, Mapping) or not {"cfg", "model"} <= set(checkpoint):
        keys = sorted(map(str, checkpoint)) if isinstance(checkpoint, Mapping) else type(checkpoint).__name__
        raise CheckpointError(
            f"{source}: not a WavLM checkpoint in microsoft/unilm's format (a dict with 'cfg' and 'model', "
            f"as the challenge's exp/asv_ssl/WavLM-Large.pt); found {keys}"
        )
    cfg = full_unilm_config(checkpoint["cfg"], source=source)
    config = transformers_config(cfg, source=source)
    state = tensor_mapping(checkpoint["model"], source=source, what="its 'model'")
    with torch.device("meta"):
        model = WavLMModel(config)
    # Checked under the file's own (unilm) names, so a refusal names what the user's file holds.
    check_fits(
        transformers_to_unilm(model.state_dict(), cfg),
        state,
        source=source,
        what=f"the WavLM its cfg describes ({config.num_hidden_layers} layers of width {config.hidden_size})",
        fix="its 'cfg' and 'model' must come from one unilm WavLM checkpoint, such as the challenge's WavLM-Large.pt",
    )
    mapped = unilm_to_transformers(state, projection_dims=(config.conv_dim[-1], config.hidden_size))
    model.load_state_dict(mapped, strict=True, assign=True)
    return WavLMLayers(model.eval(), normalize=bool(cfg["normalize"]), unilm_cfg=cfg, attention=attention)


def load_unilm_wavlm(path, *, attention: str = "fused", trusted: bool = False) -> WavLMLayers:
    """The WavLM of a unilm-format file (the challenge's ``exp/asv_ssl/WavLM-Large.pt``), frozen, on the CPU."""
    checkpoint = read_torch_file(path, what="WavLM checkpoint", trusted=trusted)
    return wavlm_from_unilm(checkpoint, source=path, attention=attention)


def unilm_checkpoint(layers: WavLMLayers) -> dict:
    """``{"cfg", "model"}`` in unilm's format for a :class:`WavLMLayers` (tiny files for tests and demos)."""
    state = {name: value.detach().clone() for name, value in layers.model.state_dict().items()}
    return {"cfg": dict(layers.unilm_cfg), "model": transformers_to_unilm(state, layers.unilm_cfg)}

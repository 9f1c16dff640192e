"""A model's shape, read from its Hugging Face `config.json` (and the checkpoint's real size from
`model.safetensors.index.json` beside it, when present).

What the memory arithmetic needs and nothing more: layers, attention heads and KV heads, the head
dimension, multi-head latent attention (MLA), sliding-window, chunked and linear-attention
(hybrid) layers, mixture-of-experts MLPs, the vocabulary and whether it is tied, a declared vision
encoder, the checkpoint's dtype and quantisation. Multi-modal configs keep the language model in
`text_config` (or `language_config`, `llm_config`); a key missing there is looked up at the top.

A file that cannot be read, is not JSON, or lacks what the arithmetic needs is one BadInput
naming the file and the key; never a traceback.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BadInput
from .precision import GROUP_OVERHEAD, dtype_bytes

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
MAX_CONFIG_BYTES = 4 << 20
MAX_LAYERS = 10_000             # the largest models have a few hundred; a per-layer table is built
_TEXT_KEYS = ("text_config", "language_config", "llm_config")
# Models whose MLP is one up and one down projection (no gate), by exact model_type: "phi" is
# Phi-1/1.5/2 (fc1/fc2, vllm/model_executor/models/phi.py), while "phi3" (Phi-3, Phi-4-mini) is a
# Llama subclass with a gated MLP (vllm/model_executor/models/phi3.py, 0.19.1) and "phimoe"'s experts
# are gated too. Falcon's older checkpoints call themselves RefinedWeb / RefinedWebModel.
_UNGATED = frozenset({"opt", "gpt2", "gpt_neox", "gpt_neox_japanese", "gptj", "falcon", "RefinedWeb",
                      "RefinedWebModel", "bloom", "starcoder2", "phi", "gpt_bigcode", "mpt"})
# Layer kinds, as config.json `layer_types` writes them, mapped to how their cache grows.
_LAYER_KINDS = {"full_attention": "full", "attention": "full", "global": "full", "sliding_attention": "sliding",
                "local": "sliding", "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "mamba",
                "mamba2": "mamba", "ssm": "mamba", "conv": "mamba"}


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): one compressed KV vector per token and layer."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Moe:
    experts: int
    top_k: int
    intermediate: int               # per expert
    shared_intermediate: int        # of the shared expert(s), 0 when none
    dense_layers: frozenset[int]    # layers with a dense MLP instead


@dataclass(frozen=True)
class Vision:
    """A declared vision encoder: its size and the largest image it is profiled with."""

    kind: str
    params: int
    hidden: int
    intermediate: int
    layers: int
    gated: bool
    patches_per_item: int           # encoder sequence of the largest image
    tokens_per_item: int            # prompt tokens that image becomes
    basis: str
    #: the attention rotates q and k (the Qwen-VL towers); how much that holds depends on the release's code
    rotary: bool = False
    #: ... and rotates them concatenated where the release does that for this tower (Qwen2.5-VL, Qwen3-VL)
    concat_qk: bool = False
    #: bytes of the input pixels per patch that stay on the GPU while the encoder runs
    pixel_bytes_per_patch: int = 0


@dataclass(frozen=True)
class Quant:
    method: str
    bytes_per_weight: float         # of the quantised linear layers, scales included
    text: str                       # "fp8 (quantization_config.quant_method)"


@dataclass(frozen=True)
class ModelShape:
    source: str                     # the config file, as named
    name: str
    architecture: str
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    max_position: int | None
    dtype: str | None               # the checkpoint's dtype (torch_dtype / dtype)
    qkv_bias: bool = False
    qk_norm: bool = False
    gated_mlp: bool = True
    rotary_dim: int = 0
    rotary_tables: int = 1              # Gemma 3 keeps one for local and one for global layers
    norms_per_layer: int = 2            # Gemma 2/3 add two more around the MLP
    mla: Mla | None = None
    moe: Moe | None = None
    layer_kinds: tuple[str, ...] = ()   # per layer: full, sliding, chunked, linear, mamba
    window: int | None = None           # tokens a sliding / chunked layer keeps
    linear_state: int = 0               # elements of state one linear / mamba layer keeps per sequence
    vision: Vision | None = None
    quant: Quant | None = None
    index_bytes: int | None = None      # model.safetensors.index.json metadata.total_size
    index_source: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    derived_max_len: int | None = None  # the longest max_model_len vLLM accepts without its override
    derived_max_key: str = ""           # what it comes from: "max_position_embeddings=131072", ...

    @property
    def dtype_bytes(self) -> float:
        return dtype_bytes(self.dtype) or 2.0

    def count(self, kind: str) -> int:
        return sum(1 for k in self.layer_kinds if k == kind)

    @property
    def attention_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k in ("full", "sliding", "chunked"))


def find_config(path: str | os.PathLike[str]) -> Path:
    """CONFIG.json, or MODEL_DIR holding config.json -> the config file; BadInput otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / CONFIG_NAME
        if not p.is_file():
            raise BadInput(str(path), f"a directory without {CONFIG_NAME}: give the model's config.json or its folder")
    elif not p.exists():
        raise BadInput(str(path), "not a local file or folder: give the model's config.json or its folder"
                       + _example(p.name))
    return p


def _example(name: str) -> str:
    """` (e.g. samples/models/NAME)`: the repository's copy of the model a missing path names (a hub
    name such as meta-llama/Llama-3.1-8B-Instruct), else its folder of them; empty where none is at
    hand (an installed package)."""
    models = Path(__file__).resolve().parents[2] / "samples" / "models"
    try:
        folders = sorted(d for d in models.iterdir() if (d / CONFIG_NAME).is_file())
    except OSError:
        return ""
    if not folders:
        return ""
    same = [d for d in folders if d.name.lower() == name.lower()]
    try:
        shown = (same[0] if same else models).relative_to(Path.cwd())
    except ValueError:
        shown = same[0] if same else models
    return f" (e.g. {shown})" if same else f" (e.g. one in {shown}{os.sep})"


def local_config(model: str | None) -> Path | None:
    """The config.json a launch's model argument points at on this host (a local model folder or
    a config file), or None (a hub name, a path of another host, anything unreadable)."""
    if not model or not isinstance(model, str) or len(model) > 4096:
        return None
    try:
        p = Path(model)
        p = p / CONFIG_NAME if p.is_dir() else p
        return p if p.is_file() and p.name.endswith(".json") else None
    except (OSError, ValueError):
        return None


def load(path: str | os.PathLike[str]) -> ModelShape:
    """The model shape from CONFIG.json or MODEL_DIR; BadInput naming the file when it cannot be used."""
    cfg_path = find_config(path)
    raw = _read_json(cfg_path)
    if not isinstance(raw, dict):
        raise BadInput(str(cfg_path), "not a Hugging Face config (a JSON object was expected)")
    index = cfg_path.parent / INDEX_NAME
    total = None
    if index.is_file():
        doc = _read_json(index)
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        total = meta.get("total_size") if isinstance(meta, dict) else None
        if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
            total = None
    return parse(raw, str(cfg_path), index_bytes=total, index_source=str(index) if total else None)


def _read_json(path: Path) -> Any:
    from ..safefile import read_limited

    data = read_limited(path, MAX_CONFIG_BYTES, f"larger than {MAX_CONFIG_BYTES >> 20} MiB: not a model config")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(str(path), "not text (binary data where JSON was expected)") from None
    except json.JSONDecodeError as exc:
        raise BadInput(str(path), f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise BadInput(str(path), "invalid JSON: nested too deep") from None


class _Keys:
    """Looks a key up in the text config, then at the top; names the file and key when missing."""

    def __init__(self, top: dict[str, Any], source: str):
        self.top = top
        self.source = source
        text = next((top[k] for k in _TEXT_KEYS if isinstance(top.get(k), dict)), None)
        self.text: dict[str, Any] = text or top
        self.prefix = next((f"{k}." for k in _TEXT_KEYS if isinstance(top.get(k), dict)), "")

    def get(self, *names: str, default: Any = None) -> Any:
        for where in (self.text, self.top):
            for name in names:
                if where.get(name) is not None:
                    return where[name]
        return default

    def int(self, *names: str, default: int | None = None, required: bool = True,
            most: int = 1 << 40) -> int | None:
        value = self.get(*names)
        if value is None:
            if default is None and required:
                raise BadInput(self.source, f"{self.prefix}{names[0]} is missing: the memory arithmetic needs it")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value != int(value) or value < 0:
            raise BadInput(self.source, f"{self.prefix}{names[0]} is {value!r}, not a whole number")
        if value > most:
            raise BadInput(self.source, f"{self.prefix}{names[0]} is {value!r}: more than {most:,}, not a real model")
        return int(value)


def parse(raw: dict[str, Any], source: str, *, index_bytes: int | None = None,
          index_source: str | None = None) -> ModelShape:
    """A ModelShape from a config.json already read (`source` names it in errors)."""
    try:
        return _parse(raw, source, index_bytes, index_source)
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError, IndexError) as exc:
        # a value of the wrong type deep in a nested section: one line, never a traceback
        raise BadInput(source, f"a value the memory arithmetic cannot use ({exc.__class__.__name__}: "
                               f"{str(exc)[:160]})") from None


def _parse(raw: dict[str, Any], source: str, index_bytes: int | None, index_source: str | None) -> ModelShape:
    k = _Keys(raw, source)
    archs = raw.get("architectures") or k.get("architectures") or ["?"]
    arch = str(archs[0]) if isinstance(archs, list) and archs else str(archs)
    model_type = str(k.text.get("model_type") or raw.get("model_type") or "?")
    hidden = k.int("hidden_size", "n_embd", "d_model", "dim")
    layers = k.int("num_hidden_layers", "n_layer", "num_layers", "n_layers", most=MAX_LAYERS)
    heads = k.int("num_attention_heads", "n_head", "num_heads", "n_heads")
    if not hidden or not layers or not heads:
        raise BadInput(source, f"{k.prefix}hidden_size, num_hidden_layers and num_attention_heads must be above 0")
    kv_heads = k.int("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num",
                     default=1 if k.get("multi_query") else heads)
    head_dim = k.int("head_dim", "attention_head_dim", default=hidden // heads)
    if not head_dim:
        raise BadInput(source, f"{k.prefix}head_dim is 0 (hidden_size {hidden} / {heads} heads)")
    vocab = k.int("vocab_size", "padded_vocab_size")
    gated = model_type not in _UNGATED
    intermediate = k.int("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size",
                         default=4 * hidden if not gated else None, required=False)
    moe = _moe(k, layers)
    if intermediate is None:
        if moe is None:
            raise BadInput(source, f"{k.prefix}intermediate_size is missing: the memory arithmetic needs it")
        intermediate = moe.intermediate
    tied = bool(k.get("tie_word_embeddings", default=model_type not in ("llama", "mistral", "mixtral", "qwen2",
                                                                        "deepseek_v2", "deepseek_v3")))
    max_pos = k.int("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length",
                    required=False)
    kinds, window = _layer_kinds(k, layers, model_type)
    derived, derived_key = _derived_max_len(k, model_type)
    mla = _mla(k)
    partial = k.get("partial_rotary_factor", default=1.0)
    rotary = int((mla.qk_rope_head_dim if mla else head_dim) * (partial if isinstance(partial, (int, float)) else 1))
    shape = ModelShape(
        source=source, name=_name(raw, source), architecture=arch, model_type=model_type, hidden=hidden,
        layers=layers, heads=heads, kv_heads=max(1, kv_heads or heads), head_dim=head_dim,
        intermediate=intermediate, vocab=vocab, tied=tied, max_position=max_pos,
        dtype=str(k.get("torch_dtype", "dtype") or "") or None,
        qkv_bias=bool(k.get("attention_bias", "qkv_bias", "bias", default=model_type.startswith("qwen2"))),
        qk_norm=model_type.startswith(("qwen3", "gemma3", "olmo2")), gated_mlp=gated, rotary_dim=rotary,
        rotary_tables=2 if k.get("rope_local_base_freq") else 1,
        norms_per_layer=4 if model_type.startswith(("gemma2", "gemma3")) else 2,
        mla=mla, moe=moe, layer_kinds=kinds, window=window, linear_state=_linear_state(k, hidden),
        vision=_vision(raw, source, hidden), quant=_quant(raw, source), index_bytes=index_bytes,
        index_source=index_source, derived_max_len=derived, derived_max_key=derived_key)
    return shape


# vllm/config/model.py:1774-1790 (0.11.0) _get_and_verify_max_len: the smallest of these wins.
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def _derived_max_len(k: _Keys, model_type: str) -> tuple[int | None, str]:
    """The longest max_model_len vLLM accepts for this config without VLLM_ALLOW_LONG_MAX_MODEL_LEN,
    as `_get_and_verify_max_len` derives it (vllm/config/model.py, 0.11.0): the smallest length
    key, scaled by rope_scaling's factor except for su/longrope/llama3 and Gemma 3, yarn from
    original_max_position_embeddings."""
    found = [(int(v), name) for name in _LENGTH_KEYS
             if isinstance(v := k.text.get(name), (int, float)) and not isinstance(v, bool) and v > 0]
    if not found:
        return None, ""
    length, key = min(found)
    text = f"{key}={length:,}"
    rope = k.get("rope_scaling")
    if isinstance(rope, dict) and "gemma3" not in model_type:
        kind = str(rope.get("rope_type") or rope.get("type") or "")
        factor = rope.get("factor", 1.0)
        if kind not in ("su", "longrope", "llama3", "") and isinstance(factor, (int, float)) and factor > 0 \
                and (factor != 1 or kind == "yarn"):
            if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int):
                length = rope["original_max_position_embeddings"]
                text = f"rope_scaling.original_max_position_embeddings={length:,}"
            length = int(length * factor)
            text += f" x rope_scaling factor {factor:g} ({kind})"
    return length, text


def _name(raw: dict[str, Any], source: str) -> str:
    name = raw.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name
    path = Path(source)
    return path.parent.name if path.name == CONFIG_NAME and path.parent.name else path.stem


def _mla(k: _Keys) -> Mla | None:
    rank = k.int("kv_lora_rank", required=False)
    if not rank:
        return None
    return Mla(rank, k.int("q_lora_rank", required=False), k.int("qk_nope_head_dim", default=128),
               k.int("qk_rope_head_dim", default=64), k.int("v_head_dim", default=128))


def _moe(k: _Keys, layers: int) -> Moe | None:
    experts = k.int("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", required=False)
    if not experts or experts < 2:
        return None
    top_k = k.int("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k", default=2)
    per_expert = k.int("moe_intermediate_size", "expert_intermediate_size", "intermediate_size")
    shared = k.int("shared_expert_intermediate_size", required=False) or 0
    n_shared = k.int("n_shared_experts", "num_shared_experts", required=False) or 0
    if n_shared and not shared:
        shared = n_shared * per_expert
    if k.get("model_type") == "llama4_text" or k.text.get("model_type") == "llama4_text":
        shared = per_expert
    dense: set[int] = set()
    first = k.int("first_k_dense_replace", required=False) or 0
    freq = k.int("moe_layer_freq", required=False) or 1
    step = k.int("decoder_sparse_step", "interleave_moe_layer_step", required=False) or 1
    only = k.get("mlp_only_layers") or []
    for i in range(layers):
        if i < first or (i % freq) != 0 or (i + 1) % step != 0 or i in only:
            dense.add(i)
    return Moe(experts, top_k, per_expert, shared, frozenset(dense))


def _layer_kinds(k: _Keys, layers: int, model_type: str) -> tuple[tuple[str, ...], int | None]:
    """Per layer: full, sliding (keeps `window` tokens), chunked (Llama 4's local attention), linear
    or mamba (a fixed state per sequence)."""
    window = k.int("sliding_window", required=False)
    chunk = k.int("attention_chunk_size", required=False)
    types = k.get("layer_types", "layers_block_type")
    if isinstance(types, list) and len(types) == layers:
        kinds = tuple(_LAYER_KINDS.get(str(t).lower(), "full") for t in types)
        return kinds, (window if "sliding" in kinds else chunk if "chunked" in kinds else None)
    pattern = k.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        kinds = tuple("mamba" if c == "M" else "full" for c in pattern if c in "M*")
        if len(kinds) == layers:
            return kinds, None
    period = k.int("attn_layer_period", required=False)
    if period:                       # Jamba: attention every `period` layers, mamba between
        offset = k.int("attn_layer_offset", default=0) or 0
        return tuple("full" if i % period == offset else "mamba" for i in range(layers)), None
    nope = k.get("no_rope_layers")
    if chunk and isinstance(nope, list) and len(nope) == layers:       # Llama 4: 1 = local (chunked) layer
        return tuple("chunked" if flag else "full" for flag in nope), chunk
    if window and k.get("use_sliding_window") is not False:
        every = k.int("sliding_window_pattern", "sliding_window_period", required=False)
        if model_type.startswith("gemma2"):
            every = 2
        if every and every > 1:      # Gemma: one global layer every `every`
            return tuple("full" if (i + 1) % every == 0 else "sliding" for i in range(layers)), window
        return ("sliding",) * layers, window
    return ("full",) * layers, None


def _linear_state(k: _Keys, hidden: int) -> int:
    """Elements of recurrent state one linear-attention / mamba layer keeps per sequence."""
    if k.get("linear_num_value_heads") is not None:          # gated delta net (Qwen3-Next)
        v_heads = k.int("linear_num_value_heads")
        k_heads = k.int("linear_num_key_heads", default=v_heads)
        kd, vd = k.int("linear_key_head_dim", default=128), k.int("linear_value_head_dim", default=128)
        conv = (2 * k_heads * kd + v_heads * vd) * ((k.int("linear_conv_kernel_dim", default=4) or 4) - 1)
        return v_heads * kd * vd + conv
    d_state = k.int("mamba_d_state", "ssm_state_size", "state_size", required=False)
    if not d_state:
        return 0
    expand = k.get("mamba_expand", "expand", default=2)
    inner = k.int("mamba_d_inner", "intermediate_size_mamba", required=False) or int(expand * hidden)
    d_conv = k.int("mamba_d_conv", "conv_kernel", default=4) or 4
    heads = k.int("mamba_n_heads", "mamba_num_heads", required=False)
    groups = k.int("mamba_n_groups", "n_groups", default=1) or 1
    if heads:                                                 # mamba2: state per head
        return inner * d_state + (inner + 2 * groups * d_state) * (d_conv - 1)
    return inner * d_state + inner * (d_conv - 1)


def _vision(raw: dict[str, Any], source: str, text_hidden: int) -> Vision | None:
    cfg = raw.get("vision_config")
    if not isinstance(cfg, dict):
        return None
    v = _Keys(cfg, source)
    v.prefix = "vision_config."
    width = v.int("embed_dim", "hidden_size", "width") if "embed_dim" in cfg else v.int("hidden_size", "width")
    depth = v.int("depth", "num_hidden_layers", "num_layers", most=MAX_LAYERS)
    patch = v.int("patch_size", "spatial_patch_size", default=14)
    model_type = str(raw.get("model_type") or "")
    if model_type.startswith(("qwen2", "qwen3")) and "vl" in model_type:
        merge = v.int("spatial_merge_size", default=2)
        temporal = v.int("temporal_patch_size", default=2)
        channels = v.int("in_channels", default=3)
        # Qwen2-VL: fc1/fc2 of mlp_ratio x width; Qwen2.5-VL: a gated SiLU MLP; Qwen3-VL: fc1/fc2 of intermediate_size
        gated = model_type.startswith("qwen2_5")
        inner = v.int("intermediate_size") if "intermediate_size" in cfg else int(width * (cfg.get("mlp_ratio") or 4))
        out = v.int("out_hidden_size", default=text_hidden) if "out_hidden_size" in cfg else \
            v.int("hidden_size", default=text_hidden)
        merged = width * merge * merge
        deepstack = len(cfg.get("deepstack_visual_indexes") or ())
        params = (channels * temporal * patch * patch * width
                  + depth * (4 * width * width + 4 * width + (3 if gated else 2) * width * inner + 2 * width)
                  + width + (1 + deepstack) * (merged * merged + merged + merged * out + out))
        # the image processor's largest image: 12,845,056 pixels at 14-pixel patches (Qwen2/2.5-VL max_pixels),
        # 16,777,216 at 16 (Qwen3-VL longest_edge): 65,536 patches, 16,384 tokens after merging either way
        pixels = 12845056 if patch == 14 else 16777216
        patches = pixels // (patch * patch)
        # the processor's pixel values reach the GPU in fp32 (Qwen2VLImageProcessor returns float32) and stay
        # referenced by the model's image input while the encoder runs (the tower casts its own copy)
        pixel_bytes = 4 * channels * temporal * patch * patch
        return Vision(model_type, params, width, inner, depth, gated, patches, patches // (merge * merge),
                      f"{depth} blocks of width {width}, largest image {pixels:,} pixels = {patches:,} patches",
                      rotary=True, concat_qk=not model_type.startswith("qwen2_vl"), pixel_bytes_per_patch=pixel_bytes)
    inner = v.int("intermediate_size", default=4 * width)
    size = v.int("image_size", default=336)
    grid = (size // patch) ** 2
    tiles = 5 if isinstance(raw.get("image_grid_pinpoints"), list) else 1        # LLaVA-NeXT: base + 4 tiles
    projector = width * text_hidden + text_hidden * text_hidden + 2 * text_hidden
    params = (3 * patch * patch * width + (grid + 1) * width + width
              + depth * (4 * width * width + 4 * width + 2 * width * inner + inner + width + 4 * width) + projector)
    return Vision(str(cfg.get("model_type") or "vision"), params, width, inner, depth, False, tiles * (grid + 1),
                  tiles * grid, f"{depth} layers of width {width}, {tiles} tile(s) of {size}x{size} pixels "
                  f"({grid} patches each)")


def _quant(raw: dict[str, Any], source: str) -> Quant | None:
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    where = "quantization_config"
    bits = q.get("bits") or q.get("w_bit") or q.get("weight_bits")
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        first = next(iter(groups.values()), {}) if isinstance(groups, dict) else {}
        weights = first.get("weights") or {} if isinstance(first, dict) else {}
        bits = weights.get("num_bits") or bits
        method = f"compressed-tensors {weights.get('type') or ''}{bits or ''}".strip()
    if q.get("load_in_4bit"):
        bits = 4
    elif q.get("load_in_8bit"):
        bits = 8
    if method in ("mxfp4", "nvfp4") or "fp4" in method:
        size = 0.5 + 1 / 32
    elif "fp8" in method or method.endswith("float8"):
        size = 1.0
    elif isinstance(bits, (int, float)) and not isinstance(bits, bool) and 1 <= bits <= 16:
        size = bits / 8 + (GROUP_OVERHEAD if bits < 8 else 0.0)
    else:
        raise BadInput(source, f"{where}: quant_method {method or '?'!r} with no bit width the arithmetic knows "
                       "(give --quantization to say how many bytes a weight takes)")
    return Quant(method or "?", size, f"{method or '?'}{f', {bits}-bit' if bits else ''} ({where})")


def rounded_up(tokens: int, block: int) -> int:
    return int(math.ceil(tokens / block) * block) if block > 1 else tokens

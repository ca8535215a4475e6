"""A decoder-only transformer in the Llama family: RMSNorm, rotary embeddings, grouped-query
attention, SwiGLU.

The model computes everything but attention itself: each layer hands its queries, keys and values
to an `attention` callable (gpu_backend.attention), which owns where K/V live (the paged pool) and
which keys each query sees. Parameter names follow Hugging Face's Llama (`embed_tokens`,
`layers.{i}.self_attn.q_proj`, ...), so a Llama checkpoint loads as is; rotary embeddings use the
same rotate-half layout as those checkpoints.

Shapes: N tokens in a forward pass, H query heads, G = KV heads (H % G == 0), D = head_dim.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from auction_gym._checks import check_int

Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""attention(layer, q (N, H, D), k (N, G, D), v (N, G, D)) -> (N, H, D)."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the model. `max_context` bounds positions (prompt + output, tokens)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_context: int
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "int" and (isinstance(v, bool) or int(v) != v or v < 1):
                raise ValueError(f"model config {f.name} must be a positive int, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def kv_elements_per_token(self) -> int:
        """K and V elements a cached token holds in all layers (times the dtype's size: bytes)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        """Our own field names (`to_json`) or a Hugging Face Llama `config.json`."""
        if "num_hidden_layers" in data:
            if data.get("rope_scaling"):
                raise ValueError(f"rope_scaling {data['rope_scaling']!r} is not supported (plain RoPE only)")
            heads = data["num_attention_heads"]
            data = dict(
                vocab_size=data["vocab_size"], hidden_size=data["hidden_size"],
                num_layers=data["num_hidden_layers"], num_heads=heads,
                num_kv_heads=data.get("num_key_value_heads", heads),
                head_dim=data.get("head_dim") or data["hidden_size"] // heads,
                intermediate_size=data["intermediate_size"], max_context=data["max_position_embeddings"],
                rope_theta=data.get("rope_theta", 10_000.0), norm_eps=data.get("rms_norm_eps", 1e-5),
                tie_embeddings=data.get("tie_word_embeddings", False),
            )
        known = {f.name for f in fields(cls)}
        if unknown := set(data) - known:
            raise ValueError(f"unknown model config fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")


PRESETS: dict[str, ModelConfig] = {
    # CPU tests: the agentic workload's vocabulary (32000) and contexts up to 8192 tokens, with a
    # hidden size small enough that a 2,048-token prefill takes tens of milliseconds on a CPU core.
    "tiny": ModelConfig(vocab_size=32_000, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                        head_dim=16, intermediate_size=172, max_context=8192),
    # Llama-3-8B's shape (8.03e9 parameters; 128 KiB of bf16 K/V per token).
    "llama-3-8b": ModelConfig(vocab_size=128_256, hidden_size=4096, num_layers=32, num_heads=32,
                              num_kv_heads=8, head_dim=128, intermediate_size=14_336, max_context=8192,
                              rope_theta=500_000.0),
}


def model_config(preset: str | ModelConfig) -> ModelConfig:
    if isinstance(preset, ModelConfig):
        return preset
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; valid: {', '.join(PRESETS)}")
    return PRESETS[preset]


def model_dtype(dtype: torch.dtype | str | None, device: str | torch.device) -> torch.dtype:
    """The floating-point dtype a model on `device` computes in: `dtype`, a torch dtype or its name
    ("float32", "bfloat16", ...), or for None bfloat16 on CUDA and float32 elsewhere. ValueError for
    a name torch does not have or a dtype that is not floating point (weights cannot be ints)."""
    if dtype is None:
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch dtype or its name (e.g. float32, bfloat16, float16), "
                         f"got {dtype!r}")
    return resolved


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.h, self.g, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.h * self.d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.g * self.d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.g * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, cfg.hidden_size, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int, attention: Attention
    ) -> torch.Tensor:
        n = x.shape[0]
        q = self.q_proj(x).view(n, self.h, self.d)
        k = self.k_proj(x).view(n, self.g, self.d)
        v = self.v_proj(x).view(n, self.g, self.d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return self.o_proj(attention(layer, q, k, v).reshape(n, self.h * self.d))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.mlp = MLP(cfg)


class Transformer(nn.Module):
    """Decoder-only transformer; see `forward`. Build with `build_model`."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def check_tokens(self, tokens: np.ndarray | Sequence[int], what: str = "tokens") -> None:
        """Raise ValueError unless every id is in [0, vocab_size)."""
        arr = np.asarray(tokens)
        if arr.size and (arr.min() < 0 or arr.max() >= self.cfg.vocab_size):
            bad = int(arr[(arr < 0) | (arr >= self.cfg.vocab_size)][0])
            raise ValueError(f"{what}: token id {bad} is outside the model's vocabulary [0, {self.cfg.vocab_size})")

    def check_length(self, length: int, what: str = "sequence") -> None:
        """Raise ValueError if a sequence of `length` tokens exceeds the model's context."""
        if length > self.cfg.max_context:
            raise ValueError(f"{what}: {length} tokens exceed the model's max_context {self.cfg.max_context}")

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape (max_context, 1, D), in float32, built on first use."""
        if self._rope is None:
            d = self.cfg.head_dim
            inv = 1.0 / (self.cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=self.device) / d))
            ang = torch.arange(self.cfg.max_context, dtype=torch.float64, device=self.device)[:, None] * inv
            ang = torch.cat((ang, ang), dim=-1)[:, None, :]
            self._rope = (ang.cos().float(), ang.sin().float())
        return self._rope

    @torch.inference_mode()
    def forward(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        attention: Attention,
        logits_at: np.ndarray | None = None,
    ) -> torch.Tensor:
        """Run N tokens through the model.

        Args:
            tokens: (N,) token ids, each in [0, vocab_size).
            positions: (N,) their positions in their sequences, each < max_context.
            attention: where K/V go and which keys each query sees (gpu_backend.attention).
            logits_at: rows whose logits to return (default all N).
        Returns:
            (len(logits_at), vocab_size) float32 logits.
        """
        self.check_tokens(tokens)
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and positions.max() >= self.cfg.max_context:
            raise ValueError(
                f"position {int(positions.max())} is beyond the model's max_context {self.cfg.max_context}"
            )
        dev = self.device
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64)).to(dev, non_blocking=True)
        pos = torch.as_tensor(positions).to(dev, non_blocking=True)
        cos_t, sin_t = self._rope_tables()
        cos, sin = cos_t[pos].to(self.dtype), sin_t[pos].to(self.dtype)
        x = self.embed_tokens(ids)
        for i, block in enumerate(self.layers):
            x = x + block.self_attn(block.input_layernorm(x), cos, sin, i, attention)
            x = x + block.mlp(block.post_attention_layernorm(x))
        if logits_at is not None:
            x = x[torch.as_tensor(np.asarray(logits_at, dtype=np.int64)).to(dev)]
        return self.lm_head(self.norm(x)).float()


def build_model(
    preset: str | ModelConfig = "tiny",
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    weights: str | Path | None = None,
) -> Transformer:
    """A model in eval mode on `device`: random weights from `seed` (normal, std 0.02; norms 1),
    or the weights in `weights`: a safetensors file (needs the `safetensors` package) or a
    `torch.save`d state dict, with its config in `config.json` beside it (our field names or a
    Hugging Face Llama config), which then overrides `preset`."""
    cfg = model_config(preset)
    seed = check_int("seed", seed, 0, 2**64 - 1)  # what torch.Generator.manual_seed takes, less the negatives
    if weights is not None:
        weights = Path(weights)
        if not weights.is_file():
            raise ValueError(f"weights: no such file {weights}")
        config_path = weights.parent / "config.json"
        if not config_path.exists():
            raise ValueError(f"{weights}: expected the model config in {config_path}")
        cfg = ModelConfig.from_dict(json.loads(config_path.read_text()))
    with torch.device(device):
        model = Transformer(cfg).to(dtype)
    if weights is None:
        gen = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("layernorm.weight") or name == "norm.weight":
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02, generator=gen)
    else:
        state = _load_state_dict(weights, device)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not (cfg.tie_embeddings and k == "lm_head.weight")]
        unexpected = [k for k in unexpected if not k.endswith("rotary_emb.inv_freq")]
        if missing or unexpected:
            raise ValueError(f"{weights}: missing parameters {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


def _load_state_dict(path: Path, device: str | torch.device) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ValueError(
                f"{path}: loading safetensors needs the `safetensors` package (pip install safetensors), "
                "or save the weights with torch.save instead"
            ) from None
        state = load_file(str(path), device=str(device))
    else:
        state = torch.load(path, map_location=device, weights_only=True)
    # Hugging Face checkpoints nest everything but lm_head under "model.".
    return {k.removeprefix("model."): v for k, v in state.items()}

"""The PyTorch serving engine: a decoder-only transformer over a paged KV pool whose slots the
radix cache owns (docs/design.md section 2). Runs on CUDA when present, on CPU otherwise.

- `build_model`, `ModelConfig`, `PRESETS` ("tiny" for CPU tests, "llama-3-8b" for GPUs): the model.
- `KVPool`: preallocated K/V tensors (layers x slots x kv_heads x head_dim) and their allocator.
- `TorchEngine`: `ServingEngine` with measured iteration times (by default the computing thread's
  CPU time, without waits for a core other processes hold; `timer.CLOCKS`); the market's `backend="torch"`.
- `speed_reference.SpeedReference`: scales iteration times by a shared machine's drifting speed (opt-in).
- `experiments/commands/calibrate.py` profiles it to fit the simulated engine's `CostModel`.
"""

from .kv_pool import KVPool
from .model import PRESETS, ModelConfig, Transformer, build_model, model_dtype
from .torch_engine import TorchEngine, default_device

__all__ = ["KVPool", "ModelConfig", "PRESETS", "Transformer", "TorchEngine", "build_model", "default_device",
           "model_dtype"]

"""Benchmark of the torch engine's kernels: prefix reuse in prefill, prefill and decode throughput.

    python -m experiments.bench.torch_engine                       # CPU, tiny preset, float32
    python -m experiments.bench.torch_engine --device cuda --preset llama-3-8b --dtype bfloat16

1. Prefill of one `--prompt`-token prompt (default 2,048) with `--cached` of it (default 90%)
   already in the KV pool, versus none cached: seconds of each and the speed-up (target >= 5x).
2. Prefill tokens/s: prompt tokens / seconds of the uncached prefill.
3. Decode: `--batch` requests of about `--context` tokens each take `--steps` decode steps;
   tokens/s = batch / seconds per step. Bytes a step must read from memory: the weights (all but
   the embedding table, of which only `batch` rows) plus every request's K/V; achieved bandwidth =
   bytes / seconds per step, and on CUDA its fraction of `--peak-bandwidth` (default 4.8e12 B/s,
   an H200's HBM3e).

Times are the minimum over `--repeats` runs after a warm-up, on `gpu_backend.timer`'s "wall" clock
(CUDA events on a GPU, elapsed time elsewhere): throughput is per elapsed second, with any number of
`--threads`.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from gpu_backend import KVPool, build_model, default_device, model_dtype
from gpu_backend.timer import DeviceTimer
from gpu_backend.torch_engine import run_decode, run_prefill

from . import Table


def _min_time(timer: DeviceTimer, fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        with timer as t:
            fn()
        best = min(best, t.seconds)
    return best


def bench(
    preset: str = "tiny", device: str | None = None, dtype: str | None = None, *, prompt: int = 2048,
    cached: float = 0.9, batch: int = 16, context: int = 1024, steps: int = 16, repeats: int = 5,
    peak_bandwidth: float = 4.8e12, seed: int = 0,
) -> dict:
    """Run the benchmark (module docstring); returns the figures, which `main` prints."""
    device = device or default_device()
    torch_dtype = model_dtype(dtype, device)
    model = build_model(preset, device=device, dtype=torch_dtype, seed=seed)
    cfg, rng, timer = model.cfg, np.random.default_rng(seed), DeviceTimer(device, "wall")
    pool = KVPool(prompt * 3 + batch * (context + steps + 1), cfg.num_layers, cfg.num_kv_heads, cfg.head_dim,
                  device=device, dtype=torch_dtype)
    empty = np.zeros(0, dtype=np.int64)

    # 1-2. Prefill with and without a cached prefix (the prefix's K/V computed for real first).
    tokens = rng.integers(0, cfg.vocab_size, prompt)
    c = int(prompt * cached)
    prefix = pool.alloc(c)
    run_prefill(model, pool, [empty], [prefix], [tokens[:c]])
    full_slots, suffix_slots = pool.alloc(prompt), pool.alloc(prompt - c)
    t_none = _min_time(timer, lambda: run_prefill(model, pool, [empty], [full_slots], [tokens]), repeats)
    t_cached = _min_time(timer, lambda: run_prefill(model, pool, [prefix], [suffix_slots], [tokens[c:]]), repeats)

    # 3. Decode steps of a batch of requests of different lengths (K/V contents do not matter).
    lens = rng.integers(context // 2, context * 3 // 2 + 1, batch)
    seqs = [pool.alloc(int(n)) for n in lens]
    step_slots = [pool.alloc(batch) for _ in range(steps)]
    ids = rng.integers(0, cfg.vocab_size, batch)

    def decode() -> None:
        ctx = list(seqs)
        for new in step_slots:
            run_decode(model, pool, ctx, new, ids)
            ctx = [np.append(s, x) for s, x in zip(ctx, new)]

    t_step = _min_time(timer, decode, max(1, repeats // 2)) / steps
    elt = torch.empty(0, dtype=torch_dtype).element_size()
    weight_bytes = (model.num_parameters() - (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.hidden_size)
                    + batch * cfg.hidden_size) * elt
    mean_context = float(lens.mean()) + (steps + 1) / 2
    kv_bytes = batch * mean_context * cfg.kv_elements_per_token * elt
    result = {
        "preset": preset, "device": device, "dtype": str(torch_dtype).removeprefix("torch."),
        "threads": torch.get_num_threads() if not device.startswith("cuda") else None,
        "prefill": {
            "prompt_tokens": prompt, "cached_tokens": c, "seconds_none_cached": t_none,
            "seconds_cached": t_cached, "speedup": t_none / t_cached, "tokens_per_s": prompt / t_none,
        },
        "decode": {
            "batch": batch, "mean_context": mean_context, "seconds_per_step": t_step,
            "tokens_per_s": batch / t_step, "bytes_per_step": weight_bytes + kv_bytes,
            "achieved_bytes_per_s": (weight_bytes + kv_bytes) / t_step,
        },
    }
    if device.startswith("cuda"):
        result["decode"]["hbm_fraction"] = (weight_bytes + kv_bytes) / t_step / peak_bandwidth
        result["decode"]["peak_bandwidth"] = peak_bandwidth
    return result


def table(quick: bool) -> Table:
    """The page's table: the tiny preset on the CPU, float32, one thread, the defaults of `bench`
    (quick: a 256-token prompt, 4 requests of about 128 tokens, 4 decode steps, 2 repeats)."""
    sizes = dict(prompt=256, batch=4, context=128, steps=4, repeats=2) if quick else {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = bench("tiny", "cpu", "float32", **sizes)
    finally:
        torch.set_num_threads(threads)
    p, d = r["prefill"], r["decode"]
    rows = [("prefill, none cached", f"{p['prompt_tokens']:,} tokens", f"{p['seconds_none_cached'] * 1e3:.1f} ms"),
            ("prefill, cached", f"{p['cached_tokens']:,} of them cached", f"{p['seconds_cached'] * 1e3:.1f} ms"),
            ("prefix reuse speed-up", "none cached / cached", f"{p['speedup']:.1f}x"),
            ("prefill throughput", "uncached prompt", f"{p['tokens_per_s']:,.0f} tokens/s"),
            ("decode step", f"{d['batch']} requests, about {d['mean_context']:,.0f} tokens of context",
             f"{d['seconds_per_step'] * 1e3:.2f} ms ({d['tokens_per_s']:,.0f} tokens/s)")]
    return Table(("figure", "of", "value"), rows, ["Target: the cached prefill at least 5x faster."])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default=None, help="default cuda if available, else cpu")
    parser.add_argument("--dtype", default=None, help="default bfloat16 on CUDA, float32 elsewhere")
    parser.add_argument("--prompt", type=int, default=2048, help="prompt tokens (default 2048)")
    parser.add_argument("--cached", type=float, default=0.9, help="cached share of the prompt (default 0.9)")
    parser.add_argument("--batch", type=int, default=16, help="decode batch (default 16)")
    parser.add_argument("--context", type=int, default=1024, help="mean decode context per request (default 1024)")
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed (default 16)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peak-bandwidth", type=float, default=4.8e12, help="B/s (default 4.8e12, H200)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = bench(args.preset, args.device, args.dtype, prompt=args.prompt, cached=args.cached, batch=args.batch,
                   context=args.context, steps=args.steps, repeats=args.repeats, peak_bandwidth=args.peak_bandwidth)
    print(json.dumps(result, indent=2))
    p, d = result["prefill"], result["decode"]
    print(f"prefill {p['prompt_tokens']} tokens: {p['seconds_none_cached'] * 1e3:.1f} ms none cached, "
          f"{p['seconds_cached'] * 1e3:.1f} ms with {p['cached_tokens']} cached: {p['speedup']:.1f}x; "
          f"{p['tokens_per_s']:.0f} prefill tokens/s")
    line = f"decode batch {d['batch']}: {d['seconds_per_step'] * 1e3:.2f} ms/step, {d['tokens_per_s']:.0f} tokens/s, " \
           f"{d['achieved_bytes_per_s'] / 1e9:.1f} GB/s"
    if "hbm_fraction" in d:
        line += f" = {100 * d['hbm_fraction']:.1f}% of {d['peak_bandwidth'] / 1e12:.2f} TB/s"
    print(line)


if __name__ == "__main__":
    main()

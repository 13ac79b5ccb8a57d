"""Serving a language model from DX-1: a paged KV cache, continuous batching and an OpenAI-compatible server.

The engine has four small parts (vLLM's and nano-vllm's shape): :class:`~.sequence.Sequence` (tokens, status,
block table), :class:`~.block_manager.BlockManager` (free list, reference counts, prefix hashes,
copy-on-write), :class:`~.scheduler.Scheduler` (waiting and running queues, a token budget, preemption by
recompute) and :class:`~.runner.ModelRunner` (one step of a batch on a device).  The HTTP server
(:mod:`.server`) is a thin ASGI app over the engine's loop, never inside it.
"""

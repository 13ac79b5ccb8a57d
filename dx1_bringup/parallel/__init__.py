"""Parallel inference over several DX-1 chips: tensor, pipeline and data parallelism, and their placement.

Tensor parallelism (:mod:`.tensor`, :mod:`.tensor_run`) splits a block's linears Megatron-LM style over the
ranks of a :class:`~dx1_bringup.collectives.DeviceGroup`, all-reducing int32 accumulators before the POSTOP
so that every degree equals one chip bit for bit.
"""

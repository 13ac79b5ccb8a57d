"""Differential fuzzing: seeded random command streams for both tiles, run on two devices and compared.

:mod:`.layout` places the streams in device memory, :mod:`.streams` draws commands (the pyuvm
environment uses it too), :mod:`.generate` turns them into capture events, :mod:`.runner` runs and
compares them; :mod:`.cli` holds the commands ``dx1 fuzz`` (``make fuzz``) and ``dx1 diff-demo``.
"""

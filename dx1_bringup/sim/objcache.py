"""A compiler wrapper that compiles Verilator's run-time library once for every build folder.

Every Verilator model links the same run-time objects (``verilated.o``, ``verilated_vpi.o``,
``verilated_threads.o`` ...), and every build folder compiles them again: about a minute of CPU per
model on a small machine, more than many models take themselves.  Verilator's makefile puts
``$(OBJCACHE)`` before each compiler command (the hook meant for ccache); :func:`dx1_bringup.sim.run_cocotb`
points it at this file.  A compile of a source file of Verilator's own ``include`` folder is looked up by
its command line (without the output name) and the source file's size and time: a hit copies the stored
object and dependency file, a miss compiles and stores them.  Every other compile (the model's own
files) runs unchanged.

Run as ``python objcache.py CACHE_DIR INCLUDE_DIR COMPILER ARGS...``; it imports nothing of the project,
so each call costs one bare interpreter start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]


def _source_and_output(args: list[str]) -> tuple[str | None, str | None]:
    """The ``.cpp`` compiled and the ``-o`` target of a compiler command line (``None`` when absent)."""
    output = args[args.index("-o") + 1] if "-o" in args[:-1] else None
    sources = [a for a in args if a.endswith(".cpp") and a != output]
    return (sources[0] if len(sources) == 1 else None), output


def main(argv: list[str]) -> int:
    """Run or answer one compiler command; the compiler's exit status."""
    if len(argv) < 4:
        sys.stderr.write("usage: objcache.py CACHE_DIR INCLUDE_DIR COMPILER ARGS...\n")
        return 2
    cache, include, command = Path(argv[1]), Path(argv[2]).resolve(), argv[3:]
    source, output = _source_and_output(command[1:])
    if source is None or output is None or Path(source).resolve().parent != include:
        return subprocess.call(command)
    stat = os.stat(source)
    key_text = "\0".join([*(a for a in command if a != output), str(stat.st_size), str(stat.st_mtime_ns)])
    key = hashlib.sha256(key_text.encode()).hexdigest()
    stored_obj, stored_dep = cache / f"{key}.o", cache / f"{key}.d"
    dep = str(Path(output).with_suffix(".d"))
    if stored_obj.exists():
        shutil.copyfile(stored_obj, output)
        if stored_dep.exists():
            shutil.copyfile(stored_dep, dep)
        return 0
    status = subprocess.call(command)
    if status == 0:
        cache.mkdir(parents=True, exist_ok=True)
        # Written under a temporary name and renamed: another build may look it up at the same time.
        for have, stored in ((output, stored_obj), (dep, stored_dep)):
            if os.path.exists(have):
                fd, tmp = tempfile.mkstemp(dir=cache)
                os.close(fd)
                shutil.copyfile(have, tmp)
                os.replace(tmp, stored)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The SoC's Verilog for any number of tiles, memory banks and MiB of memory, generated into the build folder.

``rtl/dx1_soc.v`` is the default SoC (:class:`~dx1_bringup.spec.SocConfig`, two tiles, four banks), checked in
and drift-checked.  Other configurations are generated on demand by :func:`soc_verilog` into
``build/sim/configs/t<T>-b<B>-m<MiB>/dx1_soc.v`` (never checked in), with the same top-level module name, so the
simulator servers, the backdoor and :func:`~dx1_bringup.sim.run_cocotb` (``verilog=``, built in the folder
``sim-dx1_soc`` beside the file) treat it as they treat the default one.

A chip of a board of chips in a ring (``sim:chips=N``, :class:`~dx1_bringup.gateware.soc.ring.RingChip`: the
SoC with the wire into each link port) is generated the same way by :func:`chip_verilog` into
``build/sim/configs/chip-t<T>-b<B>-m<MiB>/dx1_chip.v`` (module :data:`CHIP_MODULE`), the configuration with the
default link when it has none; the native board server runs one instance of it a chip, whatever their number.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from dataclasses import replace
from pathlib import Path

from ..gateware import RtlModule, rtl_module
from ..spec import ChipLinkConfig, SocConfig
from . import BUILD_ROOT
from .native import CHIP_MODULE

__all__ = ["CONFIG_ROOT", "CHIP_MODULE", "chip_verilog", "config_folder", "ring_config", "soc_config", "soc_verilog"]

#: Where generated SoC configurations go, one folder each.
CONFIG_ROOT = BUILD_ROOT / "configs"
#: The sources the SoC's Verilog is generated from: a change in any of them regenerates it.
_SOURCES = tuple(Path(__file__).resolve().parents[1] / part for part in ("gateware", "spec"))


def soc_config(tiles: int | None = None, banks: int | None = None, mem_mib: int | None = None,
               vector: int | None = None) -> SocConfig:
    """The default SoC with ``tiles`` tiles, ``banks`` memory banks, ``mem_mib`` MiB of device memory and, for
    ``vector`` 0, tiles without a vector unit (``None``: the default's).

    Raises
    ------
    TypeError, ValueError
        As :class:`SocConfig` does for a count it does not take (1 to 8 tiles; a power of two from 1 to 16
        banks; a power of two of MiB up to 2048; vector 0 or 1).
    """
    default = SocConfig()
    if vector not in (None, 0, 1):
        raise ValueError(f"vector must be 0 (no vector unit) or 1, not {vector!r}")
    tile = default.tile if vector is None else replace(default.tile, vector=bool(vector))
    return SocConfig(tiles=default.tiles if tiles is None else tiles, tile=tile,
                     mem_banks=default.mem_banks if banks is None else banks,
                     mem_bytes=default.mem_bytes if mem_mib is None else mem_mib << 20)


def config_folder(config: SocConfig) -> Path:
    """The folder of ``config``'s generated Verilog (and, beside it, its Verilator build)."""
    vector = "" if config.tile.vector else "-novector"
    return CONFIG_ROOT / f"t{config.tiles}-b{config.mem_banks}-m{config.mem_bytes >> 20}{vector}"


def _inputs_digest(key: str) -> str:
    digest = hashlib.sha256(key.encode())
    for root in _SOURCES:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def ring_config(config: SocConfig) -> SocConfig:
    """``config`` as a chip of a ring: with the default :class:`~dx1_bringup.spec.ChipLinkConfig` when it has
    no link (as :class:`~dx1_bringup.model.board.ModelBoard` gives its chips)."""
    return config if config.link is not None else replace(config, link=ChipLinkConfig())


def chip_folder(config: SocConfig) -> Path:
    """The folder of the generated Verilog of a chip of a ring of ``config`` (and of its Verilator build)."""
    name = f"chip-{config_folder(config).name}"
    if config.link != ChipLinkConfig():
        name += "-link" + hashlib.sha256(repr(config.link).encode()).hexdigest()[:8]
    return CONFIG_ROOT / name


def chip_verilog(config: SocConfig) -> Path:
    """The path of the Verilog of a chip of ``config`` (:func:`ring_config`) for a ring, generated when its
    sources changed, as :func:`soc_verilog` does (the module :data:`CHIP_MODULE`: the SoC with its test-only
    ``stall_units``, its ``chip_id`` an input and the wire into each link port, whose peers' ends are its ports).
    """
    config = ring_config(config)
    module = RtlModule(CHIP_MODULE, "a chip of a ring", "soc.ring:RingChip", (config,))
    return _generate(module, chip_folder(config), f"chip:{config!r}")


def _generate(module: RtlModule, folder: Path, key: str) -> Path:
    """``module``'s Verilog in ``folder``, written again only when its sources or ``key`` changed."""
    path, stamp = folder / f"{module.name}.v", folder / f"{module.name}.v.inputs"
    digest = _inputs_digest(key)
    folder.mkdir(parents=True, exist_ok=True)
    # Two processes asking for the same module at once (a bench beside a test) generate it once: the second
    # waits here and then finds the digest written.
    with open(folder / ".generate-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists() and stamp.exists() and stamp.read_text() == digest:
            return path
        text = module.verilog()
        if not path.exists() or path.read_text() != text:
            # Written whole under another name and renamed, so a reader never sees half a file.
            partial = folder / f".{module.name}.v.{os.getpid()}"
            partial.write_text(text)
            os.replace(partial, path)
        stamp.write_text(digest)
    return path


def soc_verilog(config: SocConfig) -> Path:
    """The path of the SoC's Verilog for ``config``: ``rtl/dx1_soc.v`` for the default, else generated.

    A generated file is written again only when the gateware or spec sources changed since it was
    generated (a digest of them and of ``config`` is kept beside it, in ``dx1_soc.v.inputs``), and its
    file is replaced only when the Verilog differs, so an unchanged SoC keeps its Verilator build.
    Generating an 8-tile SoC takes about two minutes of CPU (5 to 15 minutes on two busy cores).
    """
    soc = rtl_module("dx1_soc")
    if config == soc.args[0]:
        return soc.path
    module = type(soc)(soc.name, f"the whole SoC, {config.tiles} tiles, {config.mem_banks} banks",
                       soc.component, (config,), soc.kwargs)
    return _generate(module, config_folder(config), repr(config))

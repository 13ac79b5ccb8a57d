"""Generators that turn :mod:`dx1_bringup.spec` into the files a driver, a C host and a reader need.

:func:`write_all` (run by ``make rtl``) writes every output; each module here
renders one format: :mod:`.c_header`, :mod:`.json_desc`, :mod:`.markdown`,
:mod:`.py_accessors` (the register map) and :mod:`.py_link` (the links).  The
outputs are committed, and the test suite checks that regenerating them
changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..spec import SocConfig
from . import c_header, json_desc, markdown, py_accessors, py_link

__all__ = ["OUTPUTS", "write_all"]

#: Every generated file, relative to the repository root, and how it is rendered.
OUTPUTS: dict[str, Callable[[SocConfig], str]] = {
    "drivers/include/dx1_regs.h": c_header.render,
    "drivers/include/dx1_link.h": c_header.render_link,
    "drivers/dx1_driver/regs.py": py_accessors.render,
    "docs/dx1.json": json_desc.render,
    "docs/registers.md": markdown.render_registers,
    "docs/commands.md": lambda _config: markdown.render_commands(),
    "drivers/dx1_driver/link.py": py_link.render,
    "docs/link.md": lambda _config: markdown.render_link(),
}


_DEFAULT_CONFIG = SocConfig()


def write_all(root: Path, config: SocConfig = _DEFAULT_CONFIG) -> list[Path]:
    """Render every output for ``config`` and write it under ``root``.

    A file whose content is already right is left untouched, so that its
    modification time (and anything ``make`` decides from it) does not change.

    Parameters
    ----------
    root:
        Directory the output paths are relative to: the repository root, or a
        scratch directory to compare against it.
    config:
        The configuration whose register map the outputs describe.

    Returns
    -------
    list of pathlib.Path
        The path of every output, written or not, in :data:`OUTPUTS` order.
    """
    paths = []
    for relative, render in OUTPUTS.items():
        path = Path(root) / relative
        text = render(config)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        paths.append(path)
    return paths

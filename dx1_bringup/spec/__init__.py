"""The hardware/software contract of dx1-mini, as plain Python data.

Everything else (gateware decoders, the driver's accessors, the C header, the
JSON description and the Markdown reference) is generated from this package.
"""

from .chip_link import *  # noqa: F403
from .chip_link import __all__ as _chip_link_all
from .commands import *  # noqa: F403
from .commands import __all__ as _commands_all
from .config import *  # noqa: F403
from .config import __all__ as _config_all
from .link import *  # noqa: F403
from .link import __all__ as _link_all
from .postop import *  # noqa: F403
from .postop import __all__ as _postop_all
from .registers import *  # noqa: F403
from .registers import __all__ as _registers_all
from .sizes import *  # noqa: F403
from .sizes import __all__ as _sizes_all
from .stall import *  # noqa: F403
from .stall import __all__ as _stall_all
from .vector import *  # noqa: F403
from .vector import __all__ as _vector_all

__all__ = [*_chip_link_all, *_commands_all, *_config_all, *_link_all, *_postop_all, *_registers_all, *_sizes_all,
           *_stall_all, *_vector_all]

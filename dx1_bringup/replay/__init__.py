"""Record and replay: the capture file format, a recorder around any device, replay, old reproducers as captures."""

from .capture import *  # noqa: F403
from .capture import __all__ as _capture_all
from .recorder import Recorder
from .replay import *  # noqa: F403
from .replay import __all__ as _replay_all

__all__ = [*_capture_all, *_replay_all, "Recorder"]

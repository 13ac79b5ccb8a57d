"""``serial:`` device strings: which port a :class:`~.serial_transport.SerialTransport` opens, and how.

``serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone]``, where
URL is anything :func:`serial.serial_for_url` opens: ``serial:/dev/ttyUSB0@115200``,
``serial:socket://127.0.0.1:5555@3000000``, ``serial:rfc2217://host:4000``.
The default baud rate is 3 000 000.  ``timeout`` (default 1 s) is how late an
answer may be on top of its transmission time, ``retries`` (default 5) how
often one exchange is retried; the simulated board, which moves about a
kilobyte per wall-clock second, needs ``timeout=60`` or so.  ``regs`` (default
``crc``) picks the register framing; ``uartbone`` for a LiteX-style bridge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_BAUD", "DEFAULT_TIMEOUT", "DEFAULT_RETRIES", "REG_FRAMINGS", "SerialDeviceString",
           "parse_serial_device"]

#: Default baud rate of the board's UART.
DEFAULT_BAUD = 3_000_000
#: Default seconds an answer may be late, on top of its transmission time.
DEFAULT_TIMEOUT = 1.0
#: Default retries of one exchange without progress.
DEFAULT_RETRIES = 5
#: Register framings of a serial transport: CRC register frames (the default) or LiteX's UARTBone.
REG_FRAMINGS = ("crc", "uartbone")


@dataclass(frozen=True)
class SerialDeviceString:
    """What a ``serial:`` device string names: the pyserial URL and the transport's options."""

    url: str
    baud: int = DEFAULT_BAUD
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    regs: str = REG_FRAMINGS[0]


_FORMAT_HELP = ("expected serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone], for example "
                "serial:/dev/ttyUSB0@115200 or serial:socket://127.0.0.1:5555@6250000,timeout=60")
_URL_HELP = ("expected serial:URL or serial:URL@BAUD, for example serial:/dev/ttyUSB0@115200 or "
             "serial:socket://127.0.0.1:5555")


def parse_serial_device(device: str) -> SerialDeviceString:
    """Parse ``serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone]``.

    ``BAUD`` defaults to :data:`DEFAULT_BAUD`; ``timeout`` (seconds an answer may be
    late on top of its transmission time, default :data:`DEFAULT_TIMEOUT`),
    ``retries`` (default :data:`DEFAULT_RETRIES`) and ``regs`` (the register framing,
    default ``crc``; ``uartbone`` for a LiteX-style bridge) are the transport's
    parameters.  A slow line, such as the simulated board, which moves about a
    kilobyte per wall-clock second, needs a longer timeout:
    ``serial:socket://127.0.0.1:PORT@6250000,timeout=60``.

    Raises
    ------
    ValueError
        No URL, a BAUD that is not a positive integer, an unknown option, or an option value out of range.
    """
    rest = device[len("serial:"):] if device.startswith("serial:") else device
    rest, *options = rest.split(",")
    url, sep, baud = rest.rpartition("@")
    if not sep:
        url, baud = rest, str(DEFAULT_BAUD)
    if not url or not baud.isdigit() or int(baud) == 0:
        raise ValueError(f"device {device!r}: {_URL_HELP}")
    values: dict[str, Any] = {}
    for option in options:
        key, eq, text = option.partition("=")
        if key not in ("timeout", "retries", "regs") or not eq:
            raise ValueError(f"device {device!r}: unknown option {option!r}; {_FORMAT_HELP}")
        if key in values:
            raise ValueError(f"device {device!r}: option {key!r} given twice")
        if key == "regs":
            if text not in REG_FRAMINGS:
                raise ValueError(f"device {device!r}: regs must be 'crc' or 'uartbone', not {text!r}")
            values[key] = text
            continue
        try:
            value: Any = float(text) if key == "timeout" else int(text)
        except ValueError:
            value = None
        if value is None or value < 0 or (key == "timeout" and not (0 < value < float("inf"))):
            what = "a positive number of seconds" if key == "timeout" else "a non-negative integer"
            raise ValueError(f"device {device!r}: {key} must be {what}, not {text!r}") from None
        values[key] = value
    return SerialDeviceString(url, int(baud), **values)

"""Device strings: which backend opens which device, and how backends join the driver.

A backend is a function that opens a :class:`~dx1_driver.transport.Transport` for a device string.
It is registered under a key: a whole device string (``"model"``), or a prefix when the key ends in
``:`` or ``/`` (``"serial:"``, ``"sim://"``), which then matches every device string that starts with
it.  An exact key wins over a prefix, a longer prefix over a shorter one.

The driver registers its own backends here (``sim://HOST:PORT``, ``serial:URL``, ``pcie:BDF``).  Other
packages register theirs with :func:`register_backend`, or declare a function that does in the
packaging entry-point group :data:`ENTRY_POINT_GROUP`; those functions are called the first time a
device string matches no registered backend, so ``open_transport("model")`` works after only
``import dx1_driver`` wherever the dx1-bringup framework is installed, and the driver itself never
imports the framework.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata

from .sim_transport import SimTransport
from .transport import Transport

__all__ = ["ENTRY_POINT_GROUP", "Backend", "register_backend", "find_backend", "device_strings", "check_device",
           "open_transport"]

#: The entry-point group whose functions register backends (each is called once, with no arguments).
ENTRY_POINT_GROUP = "dx1_driver.backends"

#: Devices the dx1-bringup framework serves, named for the message when it is not installed.
FRAMEWORK_DEVICES = {
    "model": "the golden model",
    "model:": "the golden model with broken device memory",
    "sim": "a private simulator of the SoC",
}


@dataclass(frozen=True)
class Backend:
    """One registered backend.

    Attributes
    ----------
    key:
        A whole device string, or a prefix of device strings when it ends in ``:`` or ``/``.
    opener:
        Called with the whole device string; returns an open transport, raises ``ValueError`` for a
        malformed device string and :class:`~dx1_driver.errors.TransportError` for a device it cannot reach.
    usages:
        The device string's forms for messages and ``--help`` texts, one form each, for example
        ``("serial:URL",)``.
    check:
        Called with the whole device string; raises ``ValueError`` (the message :attr:`opener` would
        give) for a malformed one without reaching or starting anything; ``None``: no check before opening.
    """

    key: str
    opener: Callable[[str], Transport]
    usages: tuple[str, ...]
    check: Callable[[str], None] | None = None

    @property
    def builtin(self) -> bool:
        """Whether this is one of the driver's own backends."""
        return self.opener.__module__ == __name__

    @property
    def is_prefix(self) -> bool:
        """Whether :attr:`key` is a prefix of device strings rather than a whole one."""
        return self.key.endswith((":", "/"))

    def matches(self, device: str) -> bool:
        """Whether this backend opens ``device``."""
        return device.startswith(self.key) if self.is_prefix else device == self.key


_backends: dict[str, Backend] = {}
_discovered = False
#: Entry points that could not be imported, as "value: error", for the messages.
_discovery_failures: list[str] = []


def register_backend(key: str, opener: Callable[[str], Transport], usage: str | Sequence[str], *,
                     check: Callable[[str], None] | None = None) -> None:
    """Register ``opener`` for the device strings ``key`` names (see :class:`Backend`).

    ``usage`` is the device string's form (``"serial:URL"``), or its forms when the backend takes several
    (``("sim:tiles=T", "sim:verilog=PATH")``): :func:`device_strings` lists each as one entry.  ``check``
    refuses a malformed device string without opening anything (:func:`check_device`).
    Registering the same key with the same opener and usage again is harmless.

    Raises
    ------
    ValueError
        ``key`` or ``usage`` is empty, or ``key`` is registered already with another opener or usage.
    """
    usages = (usage,) if isinstance(usage, str) else tuple(usage)
    if not key or not usages or not all(isinstance(u, str) and u for u in usages):
        raise ValueError(f"a backend needs a key and a usage text, not key={key!r} and usage={usage!r}")
    backend = Backend(key, opener, usages, check)
    known = _backends.get(key)
    if known is not None and (known.opener, known.usages) != (opener, usages):
        raise ValueError(f"device key {key!r} is registered already (for {', '.join(known.usages)}, by "
                         f"{known.opener.__module__}.{known.opener.__qualname__})")
    _backends[key] = backend


def _discover() -> None:
    """Call every function of the entry-point group once; remember the ones that cannot be imported."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            register = entry_point.load()
        except ImportError as e:
            _discovery_failures.append(f"{entry_point.value}: {e}")
            continue
        register()


def _lookup(device: str) -> Backend | None:
    exact = _backends.get(device)
    if exact is not None and not exact.is_prefix:
        return exact
    prefixes = [b for b in _backends.values() if b.is_prefix and b.matches(device)]
    return max(prefixes, key=lambda b: len(b.key), default=None)


def find_backend(device: str) -> Backend | None:
    """The backend that opens ``device``, loading the entry-point group's backends if no registered one does."""
    backend = _lookup(device)
    if backend is None:
        _discover()
        backend = _lookup(device)
    return backend


def device_strings() -> tuple[str, ...]:
    """The forms of device string :func:`open_transport` takes here, one a form: other packages' backends, then
    the driver's."""
    _discover()
    ordered = sorted(_backends.values(), key=lambda b: b.builtin)
    return tuple(usage for b in ordered for usage in b.usages)


def _no_backend(device: str) -> ValueError:
    framework = next((what for key, what in FRAMEWORK_DEVICES.items()
                      if device == key or (key.endswith(":") and device.startswith(key))), None)
    if framework is None:
        return ValueError(f"unknown device {device!r}; expected one of {', '.join(device_strings())}")
    own = [b.key for b in _backends.values() if b.builtin]
    alternatives = ", ".join(own[:-1]) + f" or {own[-1]}"
    failures = f" (its backend could not be imported: {'; '.join(_discovery_failures)})" if _discovery_failures else ""
    return ValueError(f"device {device!r} is {framework}, which comes with the dx1-bringup framework; install "
                      f"dx1-bringup (pip install -e .) or use {alternatives}{failures}")


def check_device(device: str) -> None:
    """Refuse a device string that :func:`open_transport` would refuse as malformed, without opening it.

    For a command to check its device strings before any work: nothing is reached or started (a ``sim``
    is not built, a serial port not opened).  A well-formed string may still fail to open (an absent
    board: :class:`~dx1_driver.errors.TransportError`).

    Raises
    ------
    TypeError
        ``device`` is not a string.
    ValueError
        The message :func:`open_transport` would give: an unknown device string, one whose backend is not
        installed, or a malformed one (as far as its backend checks before opening).
    """
    if not isinstance(device, str):
        raise TypeError(f"device must be a device string such as 'sim://127.0.0.1:5555', not {device!r}")
    backend = find_backend(device)
    if backend is None:
        raise _no_backend(device)
    if backend.check is not None:
        backend.check(device)


def open_transport(device: str) -> Transport:
    """Open the transport named by a device string.

    Parameters
    ----------
    device:
        Of the driver's own backends: ``"sim://HOST:PORT"`` (a simulator started by ``dx1 sim serve``);
        ``"serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone]"`` (a board's UART bridge at
        any pyserial URL, for example ``serial:/dev/ttyUSB0@115200`` or ``serial:socket://127.0.0.1:5555,timeout=60``;
        3 000 000 baud, 1 s, 5 retries and CRC register frames by default; ``regs=uartbone`` for a LiteX-style
        bridge); ``"pcie:BDF"`` (a card's BARs through sysfs, for example ``pcie:0000:01:00.0``).  The
        dx1-bringup framework adds ``"model"`` (the in-process golden model), ``"model:FAULTS"`` (the same
        with broken device memory, for example ``model:stuck-bit=5``) and ``"sim"`` (a private simulator of
        the SoC, started here and stopped on close).  :func:`device_strings` lists what is registered.

    Raises
    ------
    ValueError
        For an unknown or malformed device string, or one whose backend is not installed.
    TransportError
        The device cannot be reached.
    """
    if not isinstance(device, str):
        raise TypeError(f"device must be a device string such as 'sim://127.0.0.1:5555', not {device!r}")
    backend = find_backend(device)
    if backend is None:
        raise _no_backend(device)
    return backend.opener(device)


def _sim_address(device: str) -> tuple[str, int]:
    host, sep, port = device[len("sim://"):].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"device {device!r}: expected sim://HOST:PORT, for example sim://127.0.0.1:5555")
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"device {device!r}: the port must be 1 to 65535, not {int(port)}")
    return host, int(port)


def _open_sim_socket(device: str) -> Transport:
    return SimTransport(*_sim_address(device))


def _check_serial(device: str) -> None:
    from .serial_device import parse_serial_device

    parse_serial_device(device)


def _open_serial(device: str) -> Transport:
    # Imported here: pyserial loads only for a serial device.
    from .serial_device import parse_serial_device
    from .serial_transport import SerialTransport

    parsed = parse_serial_device(device)
    return SerialTransport(parsed.url, parsed.baud, parsed.timeout, parsed.retries, regs=parsed.regs)


def _pcie_bdf(device: str) -> str:
    from .pcie import parse_bdf

    try:
        return parse_bdf(device[len("pcie:"):])
    except ValueError as e:
        raise ValueError(f"device {device!r}: {e}") from None


def _open_pcie(device: str) -> Transport:
    from .pcie import PcieTransport

    return PcieTransport(_pcie_bdf(device))


register_backend("sim://", _open_sim_socket, "sim://HOST:PORT", check=_sim_address)
register_backend("serial:", _open_serial, "serial:URL", check=_check_serial)
register_backend("pcie:", _open_pcie, "pcie:BDF", check=_pcie_bdf)

"""The driver stands alone: it imports nothing of the framework, and its own backends open without it.

The standalone checks run in a fresh interpreter whose imports of ``dx1_bringup`` are refused, the
way a machine with only the driver installed would fail them; the entry point the framework declares
is still in the installed metadata there, so its failure to import is part of what is checked.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dx1_driver import open_transport, register_backend, registry
from dx1_driver.transport import Transport

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "drivers" / "dx1_driver"

FRAMEWORK_MESSAGE = ("device {device!r} is {what}, which comes with the dx1-bringup framework; install dx1-bringup "
                     "(pip install -e .) or use sim://, serial: or pcie:")

# Runs in the child.  The fake peers answer every request with the same register value: enough for a
# transport to open (each reads GLOBAL MEM_BYTES first), and no protocol constant is written twice.
STANDALONE = r'''
import importlib.abc, json, socket, struct, sys, tempfile, threading
from pathlib import Path

class RefuseFramework(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "dx1_bringup":
            raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)", name=name)
        return None

sys.meta_path.insert(0, RefuseFramework())

import dx1_driver
from dx1_driver import TransportError, open_transport, regs
from dx1_driver.pcie import PcieTransport
from dx1_driver.sim_transport import SimTransport

MEM_BYTES = 4096
out = {}

def serve(answer):
    """A one-client TCP server on 127.0.0.1; answer(request bytes) -> reply bytes; returns the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    def run():
        conn, _ = listener.accept()
        with conn, listener:
            while data := conn.recv(65536):
                conn.sendall(answer(data))
    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1]

# sim://: a reply of status 0 and one little-endian word to each request.
port = serve(lambda request: SimTransport.RESPONSE.pack(0, 4) + MEM_BYTES.to_bytes(4, "little"))
with open_transport(f"sim://127.0.0.1:{port}") as t:
    out["sim"] = [type(t).__name__, t.mem_bytes]

# serial: in UARTBone register framing, a read of N words (the frame's second byte) is answered by N
# big-endian words.
port = serve(lambda request: MEM_BYTES.to_bytes(4, "big") * request[1])
with open_transport(f"serial:socket://127.0.0.1:{port},regs=uartbone,timeout=5,retries=0") as t:
    out["serial"] = [type(t).__name__, t.mem_bytes]

# pcie: the registry reaches the PCIe backend, and the transport maps BARs laid out like sysfs.
try:
    open_transport("pcie:0000:ff:1f.7")
except TransportError as e:
    out["pcie_missing"] = str(e)
with tempfile.TemporaryDirectory() as root:
    dev = Path(root) / "0000:03:00.0"
    dev.mkdir()
    bar0 = bytearray(0x800)
    bar0[regs.Global.MEM_BYTES:regs.Global.MEM_BYTES + 4] = MEM_BYTES.to_bytes(4, "little")
    (dev / "resource0").write_bytes(bar0)
    (dev / "resource2").write_bytes(bytes(MEM_BYTES))
    with PcieTransport("03:00.0", sysfs_root=root) as t:
        out["pcie"] = [type(t).__name__, t.mem_bytes]

for device in ("model", "model:stuck-bit=5", "sim"):
    try:
        open_transport(device)
    except ValueError as e:
        out[f"refused {device}"] = str(e)
out["device_strings"] = list(dx1_driver.device_strings())
out["framework_imported"] = sorted(m for m in sys.modules if m.split(".")[0] == "dx1_bringup")
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def standalone() -> dict:
    result = subprocess.run([sys.executable, "-c", STANDALONE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_own_backends_open_without_the_framework(standalone):
    assert standalone["sim"] == ["SimTransport", 4096]
    assert standalone["serial"] == ["SerialTransport", 4096]
    assert standalone["pcie"] == ["PcieTransport", 4096]
    assert standalone["pcie_missing"].startswith("no PCI device 0000:ff:1f.7 (")
    assert standalone["device_strings"] == ["sim://HOST:PORT", "serial:URL", "pcie:BDF"]
    assert standalone["framework_imported"] == []


@pytest.mark.parametrize("refused, what", [
    ("model", "the golden model"),
    ("model:stuck-bit=5", "the golden model with broken device memory"),
    ("sim", "a private simulator of the SoC"),
])
def test_framework_devices_say_they_need_the_framework(standalone, refused, what):
    message = standalone[f"refused {refused}"]
    assert message.startswith(FRAMEWORK_MESSAGE.format(device=refused, what=what))
    # The framework's entry point is still in the metadata here; why it failed is part of the message.
    assert message.endswith("(its backend could not be imported: dx1_bringup.backends:register: No module named "
                            "'dx1_bringup' (refused by the test))")


def test_framework_backends_come_with_only_import_dx1_driver():
    """With the framework installed, its entry point serves ``model`` to a program that imports only the driver."""
    program = ("import dx1_driver\n"
               "with dx1_driver.open_transport('model') as t:\n"
               "    print(type(t).__module__, type(t).__name__, dx1_driver.device_strings())\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(" ", 2) == [
        "dx1_bringup.backends", "ModelTransport",
        "('model', 'model:[tiles=T,banks=B,mem_mib=M,]FAULTS', 'model:chips=N[,tiles=T,...]', 'sim', "
        "'sim:tiles=T,banks=B,mem_mib=M', "
        "'sim:verilog=PATH', 'sim:[...,]stall=UNIT[+UNIT...]', 'sim:chips=N[,tiles=T,...]', 'sim://HOST:PORT', "
        "'serial:URL', 'pcie:BDF')\n"]


def test_the_readme_snippet_runs_and_prints_what_it_says():
    """README.md's "The driver as a library" snippet, run as a program of its own: each print shows its comment."""
    section = (ROOT / "README.md").read_text().split("## The driver as a library\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    said = [line.split("  # ", 1)[1] for line in code.splitlines() if line.lstrip().startswith("print(")]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == said and len(said) == 2


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement in ``path`` names (lazy ones inside functions included), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("dx1_bringup."):
            found.append((node.lineno, node.value))  # a module named as data: `python -m`, import_module
    return found


def test_no_framework_import_under_drivers():
    sources = sorted(DRIVER.rglob("*.py"))
    assert len(sources) >= 8
    offenders = [f"{path.relative_to(DRIVER.parent)}:{line}: {name}" for path in sources
                 for line, name in _imports(path) if name.split(".")[0] == "dx1_bringup"]
    assert offenders == []


def test_the_import_check_sees_lazy_imports(tmp_path):
    """The check above finds an import inside a function and a module named for ``python -m``."""
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from dx1_bringup.model import DeviceModel\n\n"
                      "ARGS = ['-m', 'dx1_bringup.sim.serve']\n")
    assert _imports(source) == [(2, "dx1_bringup.model"), (4, "dx1_bringup.sim.serve")]


# -- the registry -------------------------------------------------------------------------------------


class _Echo(Transport):
    def __init__(self, device: str):
        super().__init__(4, 4)
        self.device = device


@pytest.fixture
def own_registry(monkeypatch):
    """The registry's table, restored after the test (after discovery, so that it runs on the real table)."""
    registry.device_strings()
    monkeypatch.setattr(registry, "_backends", dict(registry._backends))


def test_exact_keys_win_over_prefixes_and_longer_prefixes_over_shorter(own_registry):
    register_backend("echo:", lambda d: _Echo(f"short {d}"), "echo:ANY")
    register_backend("echo:long:", lambda d: _Echo(f"long {d}"), "echo:long:ANY")
    register_backend("echo:exact", lambda d: _Echo(f"exact {d}"), "echo:exact")
    assert open_transport("echo:x").device == "short echo:x"
    assert open_transport("echo:long:x").device == "long echo:long:x"
    assert open_transport("echo:exact").device == "exact echo:exact"
    assert open_transport("echo:exactly").device == "short echo:exactly"
    assert registry.device_strings()[-6:-3] == ("echo:ANY", "echo:long:ANY", "echo:exact")


def test_device_strings_lists_each_form_once(own_registry):
    """A backend of several forms is several entries, not one entry joining them."""
    register_backend("echo:", lambda d: _Echo(d), ("echo:A=N", "echo:B=PATH"))
    forms = registry.device_strings()
    assert forms[-5:-3] == ("echo:A=N", "echo:B=PATH")
    assert "sim:tiles=T,banks=B,mem_mib=M" in forms and "sim:verilog=PATH" in forms
    assert not [form for form in forms if ", " in form]
    with pytest.raises(ValueError, match=r"registered already \(for echo:A=N, echo:B=PATH, by "):
        register_backend("echo:", lambda d: _Echo(d), "echo:A=N")


def test_check_device_refuses_what_open_transport_would_without_opening_anything(own_registry):
    from dx1_driver import check_device

    opened = []
    register_backend("echo:", lambda d: opened.append(d), "echo:N", check=lambda d: int(d[len("echo:"):]) and None)
    check_device("echo:5")
    check_device("serial:/dev/nonexistent-dx1")  # well formed; only opening it would fail
    check_device("pcie:0000:7f:1f.7")
    assert opened == []
    for bad, message in (("echo:x", "invalid literal"), ("sim://host", "expected sim://HOST:PORT"),
                         ("pcie:zz", "is not [DOMAIN:]BUS:DEVICE.FUNCTION"), ("nothing", "unknown device 'nothing'"),
                         ("serial:loop://,bogus=1", "unknown option 'bogus=1'")):
        with pytest.raises(ValueError, match=re.escape(message)):
            check_device(bad)


def test_registering_a_key_twice(own_registry):
    def opener(device: str) -> Transport:
        return _Echo(device)

    register_backend("twice", opener, "twice")
    register_backend("twice", opener, "twice")  # the same again: harmless
    with pytest.raises(ValueError) as info:
        register_backend("twice", _Echo, "twice")
    assert str(info.value) == (f"device key 'twice' is registered already (for twice, by {__name__}."
                               "test_registering_a_key_twice.<locals>.opener)")
    with pytest.raises(ValueError, match=r"^a backend needs a key and a usage text, not key='' and usage='x'$"):
        register_backend("", opener, "x")


def test_device_must_be_a_string():
    with pytest.raises(TypeError, match=r"^device must be a device string such as 'sim://127.0.0.1:5555', not 5$"):
        open_transport(5)

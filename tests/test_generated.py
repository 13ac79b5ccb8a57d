"""The generated files agree with the spec, compile, and are up to date in the repository."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dx1_bringup import gen, spec
from dx1_bringup.gen import c_header, py_link
from dx1_bringup.gen.common import NOTICE
from dx1_bringup.spec import (
    CHECK_ORDER,
    COMMANDS,
    COMPLETION,
    ERROR_DOCS,
    FRAME_DOCS,
    MAGIC,
    SPEC_VERSION,
    BlockType,
    Command,
    ErrorCode,
    Field,
    FrameCommand,
    FrameStatus,
    Opcode,
    SimOp,
    SimStatus,
    SocConfig,
    pack_command,
    pack_completion,
    register_map,
    struct_format,
    unpack_completion,
)

REPO = Path(__file__).resolve().parents[1]

#: The default configuration, and two that move the blocks: a GLOBAL block over 0x100 bytes
#: (so everything after it shifts) and a single tile.
CONFIGS = {
    "default": SocConfig(),
    "3tiles_100sems": SocConfig(tiles=3, semaphores=100),
    "1tile_1sem": SocConfig(tiles=1, semaphores=1),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def config_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory, config_name: str) -> Path:
    """A scratch root holding every output for one configuration."""
    root = tmp_path_factory.mktemp(config_name)
    gen.write_all(root, CONFIGS[config_name])
    return root


@pytest.fixture(scope="module")
def default_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("default_only")
    gen.write_all(root)
    return root


def _load(path: Path, name: str) -> ModuleType:
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regs(default_root: Path) -> ModuleType:
    return _load(default_root / "drivers/dx1_driver/regs.py", "dx1_regs_under_test")


def _random_command(rng: random.Random, cmd: Command) -> tuple[int, dict[str, int], dict[str, bool]]:
    """Random tag, field values over each field's whole range (ends included) and flags."""
    def value(width: int) -> int:
        return rng.choice((0, (1 << width) - 1, rng.randrange(1 << width)))

    tag = value(cmd.field("tag").width)
    fields = {f.name: value(f.width) for f in cmd.fields}
    flags = {name: rng.random() < 0.5 for name, _bit, _doc in cmd.flags}
    return tag, fields, flags


# --- drivers/dx1_driver/regs.py -------------------------------------------------------------------------------


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda op: op.name)
def test_builders_match_pack_command(regs: ModuleType, opcode: Opcode) -> None:
    rng = random.Random(0xD1 + opcode.value)
    builder = getattr(regs, opcode.name.lower())
    for _ in range(200):
        tag, fields, flags = _random_command(rng, COMMANDS[opcode])
        expected = pack_command(opcode, tag=tag, flags=flags, **fields)
        assert builder(tag=tag, **fields, **flags) == expected, (tag, fields, flags)


def test_builders_check_ranges_like_the_spec(regs: ModuleType) -> None:
    with pytest.raises(ValueError) as ours:
        regs.gemm(tag=1, a_addr=0, b_addr=0, c_addr=0, m=70000, k_chunks=1)
    with pytest.raises(ValueError) as spec:
        pack_command(Opcode.GEMM, tag=1, a_addr=0, b_addr=0, c_addr=0, m=70000, k_chunks=1)
    assert str(ours.value) == str(spec.value) == "GEMM field 'm' must fit in 16 bits unsigned, not 70000"
    with pytest.raises(ValueError, match="POSTOP field 'shift' must fit in 6 bits unsigned, not 64"):
        regs.postop(tag=0, src_addr=0, dst_addr=0, rows=1, bias_addr=0, mult=1, shift=64)
    with pytest.raises(ValueError, match="'tag' must fit in 16 bits unsigned, not -1"):
        regs.nop(tag=-1)
    with pytest.raises(TypeError, match="'length' must be an integer, not 8.0"):
        regs.copy(tag=0, src_addr=0, dst_addr=8, length=8.0)
    with pytest.raises(TypeError):
        regs.signal(tag=0, sem=1)  # count is required: no silent zero fields
    with pytest.raises(TypeError):
        regs.gemm(0, 0, 0, 0, 1, 1)  # keyword-only, so fields cannot be swapped by position


def test_command_data_matches_spec(regs: ModuleType) -> None:
    for opcode, cmd in COMMANDS.items():
        assert regs.COMMAND_FIELDS[opcode] == {f.name: (f.lsb, f.width) for f in cmd.all_fields}
        assert regs.COMMAND_FLAGS[opcode] == {name: bit for name, bit, _doc in cmd.flags}
        assert regs.RESERVED_MASK[opcode] == cmd.reserved_mask
    assert set(regs.COMMAND_FIELDS) == set(COMMANDS)
    assert regs.COMPLETION_FIELDS == {f.name: (f.lsb, f.width) for f in COMPLETION}
    for ours, theirs in ((regs.Opcode, Opcode), (regs.ErrorCode, ErrorCode), (regs.BlockType, BlockType)):
        assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]
    assert {code.name: doc for code, doc in regs.ERROR_DOCS.items()} == {c.name: d for c, d in ERROR_DOCS.items()}
    assert [code.name for code in regs.CHECK_ORDER] == [code.name for code in CHECK_ORDER]
    assert (regs.MAGIC, regs.SPEC_VERSION) == (MAGIC, SPEC_VERSION)


def test_unpack_completion_matches_spec(regs: ModuleType) -> None:
    rng = random.Random(7)
    for _ in range(200):
        entry = pack_completion(**{f.name: rng.randrange(1 << f.width) for f in COMPLETION})
        assert regs.unpack_completion(entry) == unpack_completion(entry)
    with pytest.raises(ValueError, match="8 bytes, not 7"):
        regs.unpack_completion(bytes(7))


def test_register_offsets_match_register_map(generated: Path, config_name: str) -> None:
    config = CONFIGS[config_name]
    regs = _load(generated / "drivers/dx1_driver/regs.py", f"dx1_regs_{config_name}")
    rmap = register_map(config)
    assert regs.BLOCK_BASES == {b.name: b.base for b in rmap.blocks}
    assert regs.CONFIG == dataclasses.asdict(config)
    for block in rmap.blocks:
        cls = regs.BLOCK_CLASSES[block.spec.type]
        assert (cls.TYPE, cls.BLOCK_VERSION) == (block.spec.type, block.spec.version)
        for placed in block.registers:
            reg = placed.register
            if placed.index is None:
                assert getattr(cls, reg.name) == placed.offset, (block.name, placed.name)
            else:
                assert getattr(cls, reg.name.lower())(placed.index) == placed.offset, (block.name, placed.name)
                assert getattr(cls, f"{reg.name}_COUNT") == reg.count
            for f in reg.fields:
                assert getattr(cls, f"{reg.name}_{f.name.upper()}") == (f.lsb, f.width), (block.name, placed.name)


def test_field_helpers(regs: ModuleType) -> None:
    error = 0x002A_0007
    assert regs.get_field(error, regs.Queue.ERROR_CODE) == ErrorCode.DMA_WINDOW
    assert regs.get_field(error, regs.Queue.ERROR_INDEX) == 0x2A
    assert regs.set_field(error, regs.Queue.ERROR_INDEX, 0xFFFF) == 0xFFFF_0007
    with pytest.raises(ValueError, match="fit in 5 bits"):
        regs.set_field(0, regs.Queue.RING_LOG2_LOG2, 32)
    assert regs.Global.sem(regs.Global.SEM_COUNT - 1) == regs.Global.SEM + 4 * (regs.Global.SEM_COUNT - 1)
    with pytest.raises(IndexError, match="SEM index must be 0 to 15, not 16"):
        regs.Global.sem(16)


@pytest.mark.parametrize("module", ["regs", "link"])
def test_driver_modules_pass_the_project_lint(default_root: Path, module: str) -> None:
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed")
    result = subprocess.run([ruff, "check", "--config", str(REPO / "pyproject.toml"), "--no-cache",
                             str(default_root / f"drivers/dx1_driver/{module}.py")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- drivers/dx1_driver/link.py -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def link(default_root: Path) -> ModuleType:
    return _load(default_root / "drivers/dx1_driver/link.py", "dx1_link_under_test")


def test_link_module_matches_the_spec(link: ModuleType) -> None:
    for generated, spec_enum in ((link.FrameCommand, FrameCommand), (link.FrameStatus, FrameStatus),
                                 (link.SimOp, SimOp), (link.SimStatus, SimStatus)):
        assert [(m.name, m.value) for m in generated] == [(m.name, m.value) for m in spec_enum]
    assert {k.name: v for k, v in link.FRAME_DOCS.items()} == {k.name: v for k, v in FRAME_DOCS.items()}
    for name, (order, fields, _doc) in py_link.LAYOUTS.items():
        assert getattr(link, name) == struct_format(order, fields), name
        assert getattr(link, f"{name}_FIELDS") == tuple(f.name for f in fields), name
    for name, (value, _style) in py_link.LIMITS.items():
        assert getattr(link, name) == value == getattr(spec, name), name
    assert (link.LINK_BYTE_ORDER, link.SIM_BYTE_ORDER) == (spec.LINK_BYTE_ORDER, spec.SIM_BYTE_ORDER)


@pytest.mark.parametrize("module", ["regs", "link"])
def test_driver_modules_are_standalone(default_root: Path, module: str) -> None:
    tree = ast.parse((default_root / f"drivers/dx1_driver/{module}.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
    assert imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names


def test_link_reference_lists_every_frame_and_op(default_root: Path) -> None:
    text = (default_root / "docs/link.md").read_text()
    for cmd in FrameCommand:
        assert f"| `0x{cmd.value:02x}` | `{cmd.name}` |" in text, cmd.name
    for op in SimOp:
        assert f"| {op.value} | `{op.name}` |" in text, op.name
    for name in py_link.LIMITS:
        assert f"`{name}`" in text, name


# --- docs/dx1.json ---------------------------------------------------------------------------------------------


def test_json_round_trips_to_the_spec(generated: Path, config_name: str) -> None:
    config = CONFIGS[config_name]
    desc = json.loads((generated / "docs/dx1.json").read_text())
    rmap = register_map(config)
    assert (desc["magic"], desc["spec_version"]) == (MAGIC, SPEC_VERSION)
    assert desc["config"] == dataclasses.asdict(config)
    assert desc["register_map"]["size"] == rmap.size
    assert [(b["name"], b["base"], b["next"], b["tile"]) for b in desc["register_map"]["blocks"]] == [
        (b.name, b.base, b.next, b.tile) for b in rmap.blocks]
    types = {t["name"]: t for t in desc["block_types"]}
    for block in rmap.blocks:
        described = types[block.spec.type.name]
        assert (described["id"], described["version"]) == (block.spec.type, block.spec.version)
        registers = {r["name"]: r for r in described["registers"]}
        for placed in block.registers:
            reg = registers[placed.register.name]
            assert reg["offset"] + 4 * (placed.index or 0) == placed.offset
            assert (reg["access"], reg["reset"], reg["writable_mask"], reg["count"]) == (
                placed.register.access.value, placed.register.reset, placed.register.writable_mask,
                placed.register.count)
            assert [(f["name"], f["lsb"], f["width"], f["reset"]) for f in reg["fields"]] == [
                (f.name, f.lsb, f.width, f.reset) for f in placed.register.fields]
    assert [(o["name"], o["value"]) for o in desc["opcodes"]] == [(o.name, o.value) for o in Opcode]
    assert len(desc["commands"]) == len(COMMANDS)
    for described in desc["commands"]:
        cmd = COMMANDS[Opcode[described["opcode"]]]
        assert described["value"] == cmd.opcode.value
        assert [(f["name"], f["lsb"], f["width"]) for f in described["fields"]] == [
            (f.name, f.lsb, f.width) for f in cmd.all_fields]
        assert [(f["name"], f["bit"]) for f in described["flags"]] == [(n, b) for n, b, _ in cmd.flags]
        assert int(described["reserved_mask"], 16) == cmd.reserved_mask
    assert [(f["name"], f["lsb"], f["width"]) for f in desc["completion"]["fields"]] == [
        (f.name, f.lsb, f.width) for f in COMPLETION]
    assert [(e["name"], e["value"], e["doc"]) for e in desc["error_codes"]] == [
        (c.name, c.value, ERROR_DOCS[c]) for c in ErrorCode]
    assert desc["check_order"] == [c.name for c in CHECK_ORDER]


# --- drivers/include/dx1_regs.h --------------------------------------------------------------------------------


def _c_checks(config: SocConfig, rng: random.Random) -> tuple[str, dict[str, str]]:
    """A C program printing values computed with the header, and what each line must read."""
    body: list[str] = []
    expected: dict[str, str] = {}

    def value(expr: str, want: int) -> None:
        body.append(f'    printf("%s %llu\\n", "{expr}", (unsigned long long)({expr}));')
        expected[expr] = str(want)

    for block in register_map(config).blocks:
        kind = block.spec.type.name
        base = f"DX1_{kind}_BASE({block.tile})" if block.spec.per_tile else f"DX1_{kind}_BASE"
        value(f"DX1_BLOCK_{kind}_ID", block.spec.type)
        for placed in block.registers:
            reg = placed.register
            offset = f"DX1_{kind}_{reg.name}" + ("" if placed.index is None else f"({placed.index})")
            value(f"{base} + {offset}", block.base + placed.offset)
            for f in reg.fields:
                value(f"DX1_{kind}_{reg.name}_{f.name.upper()}_MASK", f.mask)
                value(f"DX1_{kind}_{reg.name}_{f.name.upper()}_SHIFT", f.lsb)
    for op in Opcode:
        value(f"DX1_OP_{op.name}", op.value)
    for code in ErrorCode:
        value(f"DX1_ERR_{code.name}", code.value)
    value("DX1_MAGIC", MAGIC)
    value("DX1_TILES", config.tiles)
    value("DX1_BUS_BYTES", spec.BUS_BYTES)

    for opcode, cmd in COMMANDS.items():
        tag, fields, flags = _random_command(rng, cmd)
        flag_bits = " | ".join(f"(1u << DX1_CMD_{opcode.name}_FLAG_{name.upper()}_BIT)"
                               for name, on in flags.items() if on) or "0u"
        sets = [f"DX1_CMD_SET(cmd, OPCODE, DX1_OP_{opcode.name})", f"DX1_CMD_SET(cmd, TAG, {tag}u)",
                f"DX1_CMD_SET(cmd, FLAGS, {flag_bits})"]
        sets += [f"DX1_CMD_SET(cmd, {opcode.name}_{name.upper()}, {v}ull)" for name, v in fields.items()]
        body += ["    {", "        uint64_t cmd[DX1_CMD_WORDS] = {0};",
                 *(f"        bad |= {s};" for s in sets), f'        print_cmd("{opcode.name}", cmd);', "    }"]
        expected[opcode.name] = pack_command(opcode, tag=tag, flags=flags, **fields).hex()

    values = {f.name: rng.randrange(1 << f.width) for f in COMPLETION}
    entry = int.from_bytes(pack_completion(**values), "little")
    for f in COMPLETION:
        value(f"DX1_COMPLETION_GET({entry}ull, {f.name.upper()})", values[f.name])
    body += ["    {", "        uint64_t cmd[DX1_CMD_WORDS] = {0};",
             '        printf("overflow %d\\n", DX1_CMD_SET(cmd, GEMM_M, 70000));', "    }"]
    expected["overflow"] = "-1"

    program = "\n".join([
        "#include <stdio.h>",
        '#include "dx1_regs.h"',
        "",
        "static void print_cmd(const char *name, const uint64_t cmd[DX1_CMD_WORDS])",
        "{",
        '    printf("%s ", name);',
        "    for (int i = 0; i < DX1_CMD_BYTES; i++)",
        '        printf("%02x", (unsigned)((cmd[i / 8] >> (8 * (i % 8))) & 0xffu));',
        '    printf("\\n");',
        "}",
        "",
        "int main(void)",
        "{",
        "    int bad = 0;",
        *body,
        "    return bad != 0;",
        "}",
        "",
    ])
    return program, expected


def test_c_header_compiles_and_encodes_like_the_spec(generated: Path, config_name: str, tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to compile drivers/include/dx1_regs.h with")
    program, expected = _c_checks(CONFIGS[config_name], random.Random(99))
    source = tmp_path / "check.c"
    source.write_text(program)
    binary = tmp_path / "check"
    build = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror",
                            "-I", str(generated / "drivers/include"), str(source), "-o", str(binary)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    assert run.returncode == 0, "a field value did not fit where the spec says it does"
    got = dict(line.rsplit(" ", 1) for line in run.stdout.splitlines())
    assert got == expected


def test_link_header_compiles_with_the_spec_values(default_root: Path, tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to compile drivers/include/dx1_link.h with")
    expected = {f"DX1_FRAME_{c.name}": c.value for c in FrameCommand}
    expected |= {f"DX1_FRAME_{s.name}": s.value for s in FrameStatus}
    expected |= {f"DX1_SIM_{o.name}": o.value for o in SimOp} | {f"DX1_SIM_{s.name}": s.value for s in SimStatus}
    expected |= {f"DX1_{name}": value for name, (value, _style) in py_link.LIMITS.items()}
    expected |= {f"DX1_{name}_BYTES": struct.calcsize(struct_format(order, fields))
                 for name, (order, fields, _doc) in py_link.LAYOUTS.items()}
    lines = [f'    printf("{name} %llu\\n", (unsigned long long)({name}));' for name in expected]
    source = tmp_path / "link.c"
    source.write_text("\n".join(["#include <stdio.h>", '#include "dx1_link.h"', "int main(void)", "{", *lines,
                                  "    return 0;", "}", ""]))
    binary = tmp_path / "link"
    build = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I",
                            str(default_root / "drivers/include"), str(source), "-o", str(binary)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    assert {k: int(v) for k, v in (line.split() for line in run.stdout.splitlines())} == expected


def test_c_header_refuses_a_field_across_64_bit_words(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Command(Opcode.NOP, "A field at bits [71:60].", (Field("bad", 60, 12, "Straddles words 0 and 1."),))
    monkeypatch.setattr(c_header, "COMMANDS", {**COMMANDS, Opcode.NOP: broken})
    with pytest.raises(ValueError, match=r"command NOP field 'bad' bits \[71:60\] straddle a 64-bit word"):
        c_header.render(SocConfig())


# --- the repository's copies -----------------------------------------------------------------------------------


def test_outputs_are_deterministic_and_marked(default_root: Path) -> None:
    before = {rel: ((default_root / rel).read_bytes(), (default_root / rel).stat().st_mtime_ns)
              for rel in gen.OUTPUTS}
    paths = gen.write_all(default_root)
    assert paths == [default_root / rel for rel in gen.OUTPUTS]
    for rel, (data, mtime) in before.items():
        assert (default_root / rel).read_bytes() == data, f"{rel} changed on a rerun"
        assert (default_root / rel).stat().st_mtime_ns == mtime, f"{rel} was rewritten with the same content"
        text = data.decode()
        assert text.endswith("\n") and not text.endswith("\n\n"), rel
        if rel.endswith(".json"):  # JSON has no comments: the notice is the first key
            assert list(json.loads(text).items())[0] == ("_comment", NOTICE)
        else:
            assert NOTICE in text.splitlines()[0], rel


def test_repository_outputs_are_up_to_date(default_root: Path) -> None:
    stale = [rel for rel in gen.OUTPUTS
             if not (REPO / rel).is_file() or (REPO / rel).read_bytes() != (default_root / rel).read_bytes()]
    assert not stale, f"generated files differ from the spec: run `make rtl` and commit {', '.join(stale)}"

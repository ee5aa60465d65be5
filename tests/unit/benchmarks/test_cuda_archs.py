"""The fatbin reader behind docs/guide/oneflow.md's "which GPUs OneFlow 0.9.0 runs on": a
hand-built ELF with a `.nv_fatbin` section, the compatibility rule, and the installed wheel
itself when present."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from benchmarks.cuda_archs import fatbin_entries, main, nv_fatbin_section, runs_on

ROOT = Path(__file__).resolve().parents[3]


def container(*entries: tuple[int, int, bytes]) -> bytes:
    body = b""
    for kind, arch, payload in entries:
        # kind, ?, header size, payload size, compressed size, ?, version minor/major, arch
        header = struct.pack("<HHIQIIHHI", kind, 0x101, 64, len(payload), 0, 0, 7, 1, arch)
        body += header.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with(section: bytes) -> bytes:
    """A minimal ELF64: header, the section's bytes, then .shstrtab and three section headers."""
    names = b"\0.shstrtab\0.nv_fatbin\0"
    data_off = 64
    names_off = data_off + len(section)
    shoff = (names_off + len(names) + 7) // 8 * 8

    def sh(name: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, 1, 0, 0, offset, size, 0, 0, 1, 0)

    header = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 1)
    body = header + section + names
    body = body.ljust(shoff, b"\0")
    return body + sh(0, 0, 0) + sh(1, names_off, len(names)) + sh(11, data_off, len(section))


def test_reads_cubin_and_ptx_entries_across_padded_containers(tmp_path):
    blob = container((2, 86, b"S" * 40), (2, 70, b"S" * 8)) + b"\0" * 8 + container(
        (1, 80, b"P" * 24))
    lib = tmp_path / "lib.so"
    lib.write_bytes(elf_with(blob))
    data = lib.read_bytes()
    section = nv_fatbin_section(data)
    assert section == (64, len(blob))
    assert fatbin_entries(data, *section) == {("cubin", 86): 1, ("cubin", 70): 1, ("ptx", 80): 1}


def test_compatibility_rule():
    cubin86 = {("cubin", 86): 1}
    assert runs_on(cubin86, 86) and runs_on(cubin86, 89)  # same major, newer minor
    assert not runs_on(cubin86, 80) and not runs_on(cubin86, 90)  # older; Hopper
    assert runs_on({("ptx", 80): 1}, 90) and not runs_on({("ptx", 80): 1}, 75)


def test_cli_prints_the_verdict(tmp_path, capsys):
    lib = tmp_path / "lib.so"
    lib.write_bytes(elf_with(container((2, 80, b"x" * 8))))
    assert main([str(lib), "--sm", "86", "--sm", "90"]) == 0
    out = capsys.readouterr().out
    assert "lib.so: cubin sm_{80}; ptx none" in out
    assert "sm_86: runs" in out and "sm_90: no kernel image" in out


def test_not_an_elf_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="not an ELF64"):
        nv_fatbin_section(b"#!/bin/sh\n" + b"\0" * 64)


def test_the_installed_oneflow_wheel_has_no_hopper_code(capsys):
    """The OneFlow guide's statement, read from the wheel `make oneflow-env` installs."""
    libs = sorted(ROOT.glob(".venv-oneflow/lib/python3.10/site-packages/oneflow.libs/"
                            "liboneflow-*.so"))
    if not libs:
        pytest.skip("no .venv-oneflow (make oneflow-env)")
    assert main([str(libs[0]), "--sm", "86", "--sm", "90"]) == 0
    out = capsys.readouterr().out
    assert "cubin sm_{60,61,70,75,80,86}; ptx none" in out
    assert "sm_86: runs" in out and "sm_90: no kernel image" in out

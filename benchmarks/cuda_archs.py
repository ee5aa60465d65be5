"""Which NVIDIA GPU generations a CUDA shared library can run its kernels on, read from the
library itself: the cubin (SASS) and PTX entries of its `.nv_fatbin` ELF section.

    python benchmarks/cuda_archs.py LIB.so [LIB.so ...] [--sm 90]

A cubin built for sm_XY runs on devices of the same major version X with minor >= Y; PTX for
compute_XY is compiled by the driver for any device >= XY. A device that neither covers gets
"no kernel image is available for execution on the device". docs/guide/oneflow.md quotes this
tool's output for the OneFlow 0.9.0 wheel (no GPU was needed to read it).

The fatbin layout (not documented by NVIDIA; as cuobjdump and open-source readers use it): a
container header (magic 0xBA55ED50, u16 version, u16 header size, u64 payload size) followed by
entries (u16 kind: 1 = PTX, 2 = cubin; u16; u32 header size; u64 payload size; ...; u32 arch
at byte 28, e.g. 86 for sm_86).
"""

from __future__ import annotations

import argparse
import collections
import mmap
import struct
import sys
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "cubin"}


def nv_fatbin_section(data: bytes | mmap.mmap) -> tuple[int, int] | None:
    """(offset, size) of the `.nv_fatbin` section of a little-endian ELF64 file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        base = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, base)
        end = data.find(b"\x00", str_off + name_off)
        if data[str_off + name_off:end] == b".nv_fatbin":
            offset, size = struct.unpack_from("<QQ", data, base + 0x18)
            return int(offset), int(size)
    return None


def fatbin_entries(data: bytes | mmap.mmap, offset: int = 0,
                   size: int | None = None) -> collections.Counter[tuple[str, int]]:
    """Count (kind, arch) over the fatbin containers in data[offset:offset + size]."""
    end = len(data) if size is None else offset + size
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    pos = offset
    while pos + 16 <= end:
        magic, _version, header, payload = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        entry, stop = pos + header, pos + header + payload
        while entry + 32 <= stop:
            kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            arch, = struct.unpack_from("<I", data, entry + 28)
            counts[(KINDS.get(kind, f"kind{kind}"), int(arch))] += 1
            entry += entry_header + entry_size
        pos = stop
    return counts


def runs_on(entries: collections.Counter[tuple[str, int]], sm: int) -> bool:
    """Whether a device of compute capability `sm` (90 = 9.0) finds code in these entries."""
    for kind, arch in entries:
        if kind == "cubin" and arch // 10 == sm // 10 and arch % 10 <= sm % 10:
            return True
        if kind == "ptx" and arch <= sm:
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/cuda_archs.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("libraries", nargs="+", type=Path)
    p.add_argument("--sm", type=int, action="append", default=[],
                   help="compute capability to check, e.g. 80, 86, 89, 90 (repeatable)")
    args = p.parse_args(argv)
    for lib in args.libraries:
        with lib.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            section = nv_fatbin_section(data)
            entries = fatbin_entries(data, *section) if section else collections.Counter()
        cubin = sorted({a for k, a in entries if k == "cubin"})
        ptx = sorted({a for k, a in entries if k == "ptx"})
        print(f"{lib.name}: cubin sm_{{{','.join(map(str, cubin))}}}; "
              f"ptx {('compute_{' + ','.join(map(str, ptx)) + '}') if ptx else 'none'}")
        for sm in args.sm:
            print(f"  sm_{sm}: {'runs' if runs_on(entries, sm) else 'no kernel image'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

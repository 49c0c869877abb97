"""A minimal ELF reader for cubins, so the cache can validate kernels without a GPU."""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_STT_FUNC = 2
# nvcc marks `__global__` entry points with STO_CUDA_ENTRY in st_other; local `__device__`
# functions that were not inlined are STT_FUNC too but lack it (checked on nvcc 13.0 cubins).
STO_CUDA_ENTRY = 0x10


def _unpack(fmt: str, data: bytes, offset: int) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    if offset < 0 or offset + size > len(data):
        raise ValueError(f"truncated ELF: need {size} bytes at offset {offset}, have {len(data)}")
    return struct.unpack_from(fmt, data, offset)


def cubin_kernel_names(data: bytes) -> list[str]:
    """Names of the CUDA entry functions in a cubin; ValueError on a truncated or non-ELF file."""
    if len(data) < 16 or data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    is64 = {1: False, 2: True}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if is64 is None or order is None:
        raise ValueError("bad ELF identification bytes")
    if is64:
        (shoff,) = _unpack(order + "Q", data, 0x28)
        shentsize, shnum = _unpack(order + "HH", data, 0x3A)
        sh_fmt, sym_fmt = order + "IIQQQQIIQQ", order + "IBBHQQ"
    else:
        (shoff,) = _unpack(order + "I", data, 0x20)
        shentsize, shnum = _unpack(order + "HH", data, 0x2E)
        sh_fmt, sym_fmt = order + "IIIIIIIIII", order + "IIIBBH"
    if shentsize < struct.calcsize(sh_fmt):
        raise ValueError(f"bad ELF section header size {shentsize}")
    sections = [_unpack(sh_fmt, data, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    found_symtab = False
    for sh in sections:
        # name, type, flags, addr, offset, size, link, info, addralign, entsize
        if sh[1] != _SHT_SYMTAB:
            continue
        found_symtab = True
        sym_off, sym_size, link, entsize = sh[4], sh[5], sh[6], sh[9]
        if entsize < struct.calcsize(sym_fmt) or sym_off + sym_size > len(data):
            raise ValueError("truncated ELF symbol table")
        if link >= len(sections):
            raise ValueError("bad ELF string table link")
        str_off, str_size = sections[link][4], sections[link][5]
        if str_off + str_size > len(data):
            raise ValueError("truncated ELF string table")
        for i in range(sym_size // entsize):
            sym = _unpack(sym_fmt, data, sym_off + i * entsize)
            if is64:
                st_name, st_info, st_other = sym[0], sym[1], sym[2]
            else:
                st_name, st_info, st_other = sym[0], sym[3], sym[4]
            if st_info & 0xF == _STT_FUNC and st_other & STO_CUDA_ENTRY:
                end = data.find(b"\0", str_off + st_name, str_off + str_size)
                if end < 0:
                    raise ValueError("unterminated ELF symbol name")
                names.append(data[str_off + st_name : end].decode("utf-8", "replace"))
    if not found_symtab:
        raise ValueError("ELF has no symbol table")
    return names


def count_cubin_kernels(data: bytes) -> int:
    """Number of `__global__` entry points in a cubin."""
    return len(cubin_kernel_names(data))

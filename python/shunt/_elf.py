"""What an ELF shared object or program defines, imports and needs: its dynamic symbol table and
dynamic section, read directly so that the checks need neither binutils nor a compiler (a wheel
runs where neither is installed). Only the sections named are read, never the whole file: a real
libnccl.so.2 is hundreds of megabytes."""

import struct

SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHN_UNDEF = 0
DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29
STB_WEAK = 2


class ElfInfo:
    def __init__(self):
        self.defined = set()  # dynamic symbols the object defines
        self.undefined = set()  # dynamic symbols it imports (weak ones included)
        self.weak_undefined = set()
        self.needed = []
        self.soname = None
        self.runpath = []  # DT_RUNPATH, else DT_RPATH, split on ':'


def _cstr(blob, off):
    end = blob.find(b"\0", off)
    return blob[off : end if end >= 0 else len(blob)].decode("utf-8", "replace")


def read(path):
    """ElfInfo for `path`, or None when it is not a 64-bit little-endian ELF file."""
    with open(path, "rb") as f:
        ident = f.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            return None
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", ident, 0x3A)
        if shoff == 0 or shnum == 0 or shentsize < 64:
            return None
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = []
        for i in range(shnum):
            # name, type, flags, addr, offset, size, link, info, addralign, entsize
            sections.append(struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize))

        def load(index):
            s = sections[index]
            f.seek(s[4])
            return f.read(s[5])

        info = ElfInfo()
        rpath = runpath = None
        for s in sections:
            if s[1] == SHT_DYNSYM and s[9]:
                f.seek(s[4])
                syms = f.read(s[5])
                names = load(s[6])
                for off in range(s[9], len(syms) - s[9] + 1, s[9]):  # entry 0 is the null symbol
                    st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", syms, off)
                    if not st_name:
                        continue
                    name = _cstr(names, st_name)
                    if st_shndx == SHN_UNDEF:
                        info.undefined.add(name)
                        if st_info >> 4 == STB_WEAK:
                            info.weak_undefined.add(name)
                    else:
                        info.defined.add(name)
            elif s[1] == SHT_DYNAMIC and s[9]:
                f.seek(s[4])
                dyn = f.read(s[5])
                strtab = load(s[6])
                for off in range(0, len(dyn) - 15, 16):
                    tag, val = struct.unpack_from("<qQ", dyn, off)
                    if tag == 0:
                        break
                    if tag == DT_NEEDED:
                        info.needed.append(_cstr(strtab, val))
                    elif tag == DT_SONAME:
                        info.soname = _cstr(strtab, val)
                    elif tag == DT_RPATH:
                        rpath = _cstr(strtab, val)
                    elif tag == DT_RUNPATH:
                        runpath = _cstr(strtab, val)
        chosen = runpath if runpath is not None else rpath
        info.runpath = [p for p in (chosen or "").split(":") if p]
        return info


def safe_read(path):
    """read(), or None when the file cannot be read."""
    try:
        return read(path)
    except (OSError, struct.error, IndexError):
        return None


def is_shunt(path):
    """Whether `path` is a build of shunt, whatever its name (it defines shuntVersion)."""
    info = safe_read(path)
    return info is not None and "shuntVersion" in info.defined


def defines_nccl(path):
    """Whether `path` defines NCCL's API (a real NCCL, shunt, or another interposer)."""
    info = safe_read(path)
    return info is not None and "ncclAllReduce" in info.defined

"""What shunt needs to know about an installed PyTorch, read from its files without importing it
(an import takes seconds and loads CUDA): its version, the NCCL it loads itself, and whether shunt
defines every NCCL function it imports (scripts/check-nccl-imports.sh's check: a function shunt
lacks would stop PyTorch from loading with shunt preloaded)."""

import os
import re

from . import _elf, _nccl


class TorchInfo:
    def __init__(self, folder):
        self.folder = folder
        self.version = _version(folder)
        self.nccl, self.linkage = _nccl.torch_nccl(folder)  # see _nccl.torch_nccl
        self.clients = _nccl_clients(folder)  # the libraries of torch/lib that import NCCL


def _version(folder):
    try:
        with open(os.path.join(folder, "version.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", f.read(), re.M)
            return m.group(1) if m else "?"
    except OSError:
        return "?"


def _nccl_clients(folder):
    lib = os.path.join(folder, "lib")
    try:
        names = sorted(os.listdir(lib))
    except OSError:
        return []
    out = []
    for n in names:
        if ".so" not in n or n.startswith("libnccl"):
            continue
        info = _elf.safe_read(os.path.join(lib, n))
        if info and "libnccl.so.2" in info.needed:
            out.append(os.path.join(lib, n))
    return out


def missing_imports(clients, library):
    """(number of NCCL functions the clients import, [strong ones libshunt lacks], [weak ones it
    lacks]). Weak imports do not stop loading: the client checks them for NULL."""
    defined = (_elf.safe_read(library) or _elf.ElfInfo()).defined
    wanted, weak = set(), set()
    for c in clients:
        info = _elf.safe_read(c)
        if not info:
            continue
        for s in info.undefined:
            if s.startswith("nccl") or s.startswith("pnccl"):
                wanted.add(s)
                if s in info.weak_undefined:
                    weak.add(s)
    lacking = sorted(wanted - defined)
    return len(wanted), [s for s in lacking if s not in weak], [s for s in lacking if s in weak]


def find(python=None):
    """TorchInfo for the PyTorch of `python` (default: this interpreter), or None."""
    folder = _nccl.probe(python).get("torch")
    return TorchInfo(folder) if folder else None

"""Finding the real libnccl.so.2 a job should forward to, the way its user would expect: an
explicit choice (--nccl, SHUNT_NCCL_LIB), then the nvidia.nccl package of the interpreter that runs
the job (where PyTorch's wheels take theirs from), then PyTorch's own library folder, then the
places the library itself searches (LD_LIBRARY_PATH, CUDA_HOME, the system's folders). shunt
itself, under any name, is never an answer."""

import json
import os
import re
import shutil
import subprocess
import sys

from . import _elf

# The library's own search after LD_LIBRARY_PATH and CUDA_HOME (src/fallback/loader.c).
SYSTEM_DIRS = (
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/lib",
)
NAMES = ("libnccl.so.2", "libnccl.so")


class Found:
    def __init__(self, path, source):
        self.path = path
        self.source = source  # what chose it, in words

    def __repr__(self):
        return "Found(%r, %r)" % (self.path, self.source)


# Run in the job's interpreter: where its nvidia.nccl and torch packages are, without importing
# torch (seconds) or anything of NCCL's.
_PROBE = r"""
import importlib.util, json, os
out = {"nvidia_nccl": None, "torch": None}
try:
    s = importlib.util.find_spec("nvidia.nccl")
    if s is not None and s.submodule_search_locations:
        out["nvidia_nccl"] = list(s.submodule_search_locations)[0]
except Exception:
    pass
try:
    s = importlib.util.find_spec("torch")
    if s is not None and s.origin:
        out["torch"] = os.path.dirname(s.origin)
except Exception:
    pass
"""

_PYTHON_NAME = re.compile(r"^python[0-9.]*$")


def _probe_here():
    scope = {}
    exec(compile(_PROBE, "<probe>", "exec"), scope)
    return scope["out"]


def probe(python=None):
    """{'nvidia_nccl': folder or None, 'torch': folder or None} as seen by `python`."""
    if python is None or _same_interpreter(python):
        return _probe_here()
    try:
        r = subprocess.run([python, "-c", _PROBE + "print(json.dumps(out))\n"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30)
        return json.loads(r.stdout.decode() or "{}") if r.returncode == 0 else {}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


def _same_interpreter(python):
    # A virtual environment's python links to the base interpreter, so the files are the same
    # while the packages differ: the folder decides.
    a = os.path.abspath(python)
    b = os.path.abspath(sys.executable)
    return a == b or os.path.dirname(a) == os.path.dirname(b)


def _shebang_python(path):
    """The Python interpreter named by the #! line of the script `path`, or None."""
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        words = [w for w in words[1:] if not w.startswith("-")]
        if not words:
            return None
        return shutil.which(words[0]) if _PYTHON_NAME.match(os.path.basename(words[0])) else None
    return words[0] if _PYTHON_NAME.match(os.path.basename(words[0])) else None


def job_python(command, path=None):
    """The Python interpreter that will run the job COMMAND, when it can be told: the first word
    of the command line that is a Python interpreter or a script whose #! line names one (python,
    torchrun, `srun python ...`, `mpirun -np 4 python ...`); else None."""
    for word in command:
        if word.startswith("-"):
            continue
        base = os.path.basename(word)
        exe = word if "/" in word else shutil.which(word, path=path)
        if not exe:
            continue
        if _PYTHON_NAME.match(base):
            return exe
        py = _shebang_python(exe)
        if py:
            return py
    return None


def _usable(path):
    return os.path.isfile(path) and not _elf.is_shunt(path)


def _in_dir(folder):
    for name in NAMES:
        p = os.path.join(folder, name)
        if _usable(p):
            return p
    return None


def find(explicit=None, python=None, env=None, explicit_source="--nccl"):
    """The real NCCL, as Found, or None. `explicit` is the launcher's --nccl (or what else the user
    chose, named by explicit_source); `python` the job's interpreter (None: this one); `env` the
    job's environment (default os.environ)."""
    env = os.environ if env is None else env
    if explicit:
        return Found(os.path.abspath(explicit), explicit_source)
    for var in ("SHUNT_NCCL_LIB", "MSCCLPP_NCCL_LIB_PATH"):
        if env.get(var):
            return Found(env[var], var)
    where = probe(python)
    who = "of " + (python or sys.executable)
    if where.get("nvidia_nccl"):
        p = _in_dir(os.path.join(where["nvidia_nccl"], "lib"))
        if p:
            return Found(p, "the nvidia.nccl package " + who)
    if where.get("torch"):
        p = _in_dir(os.path.join(where["torch"], "lib"))
        if p:
            return Found(p, "PyTorch's library folder " + who)
    dirs = [(d, "LD_LIBRARY_PATH") for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    if env.get("CUDA_HOME"):
        dirs += [(os.path.join(env["CUDA_HOME"], sub), "CUDA_HOME") for sub in ("lib64", "lib")]
    for d, var in dirs:
        p = _in_dir(d)
        if p:
            return Found(p, var)
    for d in SYSTEM_DIRS:
        p = _in_dir(d)
        if p:
            return Found(p, "the system's folders")
    return None


def torch_nccl(torch_dir):
    """The libnccl.so.2 PyTorch itself loads (through libtorch_cuda.so's RUNPATH), as
    (path or None, how), where how is 'dynamic', 'static' (NCCL linked into PyTorch: nothing to
    preload into) or 'cpu' (a build without CUDA)."""
    lib = os.path.join(torch_dir, "lib", "libtorch_cuda.so")
    info = _elf.safe_read(lib)
    if info is None:
        return None, "cpu"
    if "libnccl.so.2" not in info.needed:
        return None, "static" if "ncclAllReduce" in info.defined else "none"
    origin = os.path.dirname(lib)
    for rp in info.runpath:
        d = rp.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
        p = os.path.join(d, "libnccl.so.2")
        if os.path.isfile(p):
            return os.path.realpath(p), "dynamic"
    return None, "dynamic"

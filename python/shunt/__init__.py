"""shunt: a drop-in NCCL-compatible library, installed as a wheel.

`python -m shunt run -- COMMAND ...` starts COMMAND with shunt preloaded; `python -m shunt
doctor` says whether shunt will serve this machine. The helpers below say where the installed
parts are. Importing this package loads nothing and starts nothing: the launcher imports it in
front of every job.
"""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))

# Whether the installed library understands SHUNT_TUNING=auto (tuning inside the job, with
# SHUNT_TUNING_CACHE). The library exports nothing that says so, so the package, built with it,
# says it (docs/tuning.md, "Tuning inside the job").
_TUNING_AUTO = True


def _installed(*parts):
    path = os.path.join(_HERE, *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(
            "%s is not installed beside the shunt package (%s): install shunt with pip" % (os.path.join(*parts), _HERE)
        )
    return path


def library_path():
    """The installed libshunt.so, the file to preload (its soname is libnccl.so.2)."""
    return _installed("lib", "libshunt.so")


def nccl_link_dir():
    """The folder holding the installed library under the name libnccl.so.2, for LD_LIBRARY_PATH."""
    return _installed("lib", "shunt")


def plan_dir():
    """The folder of execution plans shipped with shunt (SHUNT_PLAN_DIR's default under `shunt run`)."""
    return _installed("share", "shunt", "plans")


def tool_path(name):
    """The installed tool `name` (shunt-perf, shunt-plan, shunt-info, shunt-tune)."""
    return _installed("bin", name)


def nccl_path(python=None):
    """The real libnccl.so.2 shunt would forward to under `shunt run`, or None when there is none:
    SHUNT_NCCL_LIB when set, else the nvidia.nccl package of `python` (default: this interpreter),
    else PyTorch's own library folder, else the system's."""
    from . import _nccl

    found = _nccl.find(python=python)
    return found.path if found else None


def tuning_auto_supported():
    """Whether the installed library understands SHUNT_TUNING=auto."""
    return _TUNING_AUTO


def version():
    """shunt's version, as the build wrote it."""
    try:
        from . import _build

        return _build.VERSION
    except ImportError:
        return "unknown (not built)"


__version__ = version()
__all__ = ["library_path", "nccl_link_dir", "plan_dir", "tool_path", "nccl_path", "tuning_auto_supported", "version"]

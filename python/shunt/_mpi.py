"""Launchers that do not pass the environment on. Open MPI's mpirun starts remote ranks with only
the variables named by `-x VAR`; MPICH's and Intel MPI's mpiexec, srun and torchrun pass the whole
environment, so only Open MPI's command line is changed."""

import os
import subprocess

MPI_LAUNCHERS = frozenset(("mpirun", "mpiexec", "orterun", "prterun", "oshrun", "shmemrun"))


def is_open_mpi(exe):
    """Whether the launcher at `exe` (a resolved path) is Open MPI's."""
    real = os.path.realpath(exe)
    base = os.path.basename(real)
    if base in ("orterun", "prterun") or "openmpi" in real.lower():
        return True
    if "mpich" in real.lower() or "hydra" in base or "intel" in real.lower():
        return False
    try:
        r = subprocess.run([exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return False
    out = r.stdout.decode("utf-8", "replace")
    return "Open MPI" in out or "OpenRTE" in out or "PRRTE" in out


def exported(command):
    """The variables COMMAND's Open MPI options already pass (-x VAR or -x VAR=value)."""
    names = set()
    for i, word in enumerate(command[:-1]):
        if word == "-x":
            names.add(command[i + 1].split("=", 1)[0])
    return names


def add_exports(command, names):
    """COMMAND with `-x NAME` after the launcher for each of `names` not already passed; also
    returns the names added."""
    have = exported(command)
    added = [n for n in names if n not in have]
    extra = []
    for n in added:
        extra += ["-x", n]
    return [command[0]] + extra + list(command[1:]), added

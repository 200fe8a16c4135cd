"""`python -m shunt run [options] -- COMMAND ...` (also `shunt-run`): COMMAND with shunt preloaded.

It sets what a preloaded shunt needs and leaves the rest as the user has it: LD_PRELOAD (shunt
first, then the user's), SHUNT_NCCL_LIB (the real NCCL, found as _nccl.find says), SHUNT_PLAN_DIR
(the shipped plans unless the user chose a folder) and SHUNT_TUNING=auto where the library knows
the word and the user set nothing. One line on stderr says what it set; a problem with the
machine or the input gets one line of its own and the job still runs; then COMMAND replaces this
process, so its exit status and signals are the job's own.
"""

import os
import shlex
import shutil
import sys

import shunt

from . import _elf, _mpi, _nccl

USAGE = """usage: python -m shunt run [options] [--] COMMAND [ARG...]
       shunt-run [options] [--] COMMAND [ARG...]

Starts COMMAND with shunt preloaded (torchrun, srun and Open MPI's mpirun pass it to every rank).
  --nccl PATH     the real libnccl.so.2 to forward to (default: SHUNT_NCCL_LIB, else the
                  nvidia.nccl package of the job's Python, PyTorch's library folder, the system's)
  --plans DIR     the plan folder (default: SHUNT_PLAN_DIR, else the plans shipped with shunt)
  --lib PATH      the shunt library to preload (default: the installed one)
  --dry-run       print the variables and the command line instead of running it
  -h, --help      this text
"""

PREFIX = "shunt-run: "


class Usage(Exception):
    pass


def parse(argv):
    """(options dict, COMMAND list) from the launcher's arguments."""
    opts = {"nccl": None, "plans": None, "lib": None, "dry_run": False, "help": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a in ("-h", "--help"):
            opts["help"] = True
        elif a == "--dry-run":
            opts["dry_run"] = True
        elif a in ("--nccl", "--plans", "--lib") or a.split("=", 1)[0] in ("--nccl", "--plans", "--lib"):
            key, _, val = a.partition("=")
            if not _:
                i += 1
                if i >= len(argv):
                    raise Usage("%s needs a value" % key)
                val = argv[i]
            opts[key[2:]] = val
        elif a.startswith("-"):
            raise Usage("unknown option %s" % a)
        else:
            break
        i += 1
    return opts, argv[i:]


def _preload_words(value):
    # ld.so splits LD_PRELOAD on spaces and colons alike.
    return [w for w in value.replace(":", " ").split() if w]


def _resolve_lib(word, env):
    """The file a bare LD_PRELOAD name would load, as far as it can be told, else None."""
    if "/" in word:
        return word if os.path.exists(word) else None
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d] + list(_nccl.SYSTEM_DIRS)
    for d in dirs:
        p = os.path.join(d, word)
        if os.path.exists(p):
            return p
    return None


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def build(opts, command, env):
    """What `shunt run` would do: (environment, command, what-it-set line, other lines).
    Nothing is run here but an `mpirun --version` and, where the job's Python is not this
    one, a short probe of that interpreter's packages."""
    env = dict(env)
    notes = []  # one line each, for problems
    said = []  # the parts of the one line that says what was set
    exports = []  # variables set here, which Open MPI must be told to pass on

    lib = os.path.abspath(opts["lib"]) if opts["lib"] else shunt.library_path()
    if not os.path.isfile(lib):
        notes.append("the shunt library %s does not exist: COMMAND runs without shunt" % lib)
        lib = None

    # LD_PRELOAD: shunt first; a shunt already there is not preloaded twice; another NCCL
    # library is taken out, since two libraries each claiming the NCCL API in one process leave
    # it to load order which one a call reaches.
    keep, preloaded_nccl = [], None
    for word in _preload_words(env.get("LD_PRELOAD", "")):
        path = _resolve_lib(word, env)
        if lib and path and (_same_file(path, lib) or _elf.is_shunt(path)):
            if not _same_file(path, lib):
                notes.append("LD_PRELOAD named another shunt, %s: %s is preloaded instead" % (word, lib))
            continue
        names_nccl = (path is not None and _elf.defines_nccl(path)) or (
            path is None and "nccl" in os.path.basename(word)
        )
        if lib and names_nccl:
            if os.path.basename(word).startswith("libnccl.so") and path:
                preloaded_nccl = os.path.abspath(path)
                notes.append(
                    "LD_PRELOAD named the real NCCL %s: taken out of LD_PRELOAD%s"
                    % (word, "" if opts["nccl"] or env.get("SHUNT_NCCL_LIB") else "; shunt forwards to it")
                )
            else:
                notes.append(
                    "LD_PRELOAD already names another NCCL interposer, %s: taken out of the job's LD_PRELOAD "
                    "(with two libraries claiming the NCCL API, load order would decide which serves a call)" % word
                )
            continue
        keep.append(word)
    if lib:
        env["LD_PRELOAD"] = ":".join([lib] + keep)
        said.append("LD_PRELOAD=%s%s" % (lib, " (before yours)" if keep else ""))
        exports.append("LD_PRELOAD")
    elif keep or "LD_PRELOAD" in env:
        env["LD_PRELOAD"] = ":".join(keep)

    # The real NCCL.
    python = _nccl.job_python(command, path=env.get("PATH")) if command else None
    if opts["nccl"]:
        found = _nccl.find(explicit=opts["nccl"], python=python, env=env)
    elif preloaded_nccl and not env.get("SHUNT_NCCL_LIB"):
        found = _nccl.find(explicit=preloaded_nccl, python=python, env=env, explicit_source="it was in LD_PRELOAD")
    else:
        found = _nccl.find(python=python, env=env)
    if found is None:
        notes.append(
            "no real NCCL found (no --nccl or SHUNT_NCCL_LIB, no nvidia.nccl package of %s, no libnccl.so.2 in "
            "PyTorch's folder, LD_LIBRARY_PATH, CUDA_HOME or the system's folders): the job runs, and calls "
            "no plan serves fail" % (python or sys.executable)
        )
        said.append("no real NCCL")
    else:
        if not os.path.isfile(found.path):
            notes.append("the real NCCL %s (%s) does not exist: calls no plan serves will fail" % (found.path, found.source))
        if found.source in ("SHUNT_NCCL_LIB", "MSCCLPP_NCCL_LIB_PATH"):
            said.append("%s=%s (yours)" % (found.source, found.path))
        else:
            env["SHUNT_NCCL_LIB"] = found.path
            said.append("SHUNT_NCCL_LIB=%s (%s)" % (found.path, found.source))
            exports.append("SHUNT_NCCL_LIB")

    # The plans.
    user_plans = env.get("SHUNT_PLAN_DIR") or env.get("MSCCLPP_EXECUTION_PLAN_DIR")
    if opts["plans"]:
        plans = os.path.abspath(opts["plans"])
        env["SHUNT_PLAN_DIR"] = plans
        said.append("SHUNT_PLAN_DIR=%s" % plans)
        exports.append("SHUNT_PLAN_DIR")
    elif user_plans:
        plans = user_plans
        said.append("SHUNT_PLAN_DIR=%s (yours)" % plans)
    else:
        plans = shunt.plan_dir()
        env["SHUNT_PLAN_DIR"] = plans
        said.append("SHUNT_PLAN_DIR=%s (the shipped plans)" % plans)
        exports.append("SHUNT_PLAN_DIR")
    if not os.path.isdir(plans):
        notes.append("the plan folder %s does not exist: no plan serves any call, every call goes to NCCL" % plans)

    # Tuning: the user's choice stands; else in-job tuning where the library has it.
    if env.get("SHUNT_TUNING"):
        said.append("SHUNT_TUNING=%s (yours)" % env["SHUNT_TUNING"])
    elif shunt.tuning_auto_supported():
        env["SHUNT_TUNING"] = "auto"
        said.append("SHUNT_TUNING=auto")
        exports.append("SHUNT_TUNING")

    # Open MPI passes nothing to remote ranks unless told.
    if command and os.path.basename(command[0]) in _mpi.MPI_LAUNCHERS:
        exe = shutil.which(command[0], path=env.get("PATH"))
        if exe and _mpi.is_open_mpi(exe):
            names = exports + sorted(k for k in env if k.startswith("SHUNT_") and k not in exports)
            command, added = _mpi.add_exports(command, names)
            if added:
                said.append("%s: added %s" % (os.path.basename(command[0]), " ".join("-x " + n for n in added)))
    line = PREFIX + "; ".join(said)
    return env, command, line, [PREFIX + n for n in notes]


def _exec(command, env):
    """Replaces this process with COMMAND; returns an exit status only when it cannot."""
    exe = command[0] if "/" in command[0] else shutil.which(command[0], path=env.get("PATH", os.defpath))
    if not exe or not os.path.exists(exe):
        sys.stderr.write(PREFIX + "command not found: %s\n" % command[0])
        return 127
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        os.execve(exe, command, env)
    except OSError as e:
        sys.stderr.write(PREFIX + "cannot run %s: %s\n" % (exe, e.strerror))
        return 126
    return 126  # not reached


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, command = parse(argv)
    except Usage as e:
        sys.stderr.write(PREFIX + "%s\n%s" % (e, USAGE))
        return 2
    if opts["help"]:
        sys.stdout.write(USAGE)
        return 0
    if not command:
        sys.stderr.write(PREFIX + "no COMMAND given\n" + USAGE)
        return 2
    try:
        env, command, line, notes = build(opts, command, os.environ)
    except FileNotFoundError as e:
        sys.stderr.write(PREFIX + "%s\n" % e)
        return 2
    for n in notes:
        sys.stderr.write(n + "\n")
    sys.stderr.write(line + "\n")
    if opts["dry_run"]:
        for k in sorted(env):
            if env.get(k) != os.environ.get(k):
                sys.stdout.write("%s=%s\n" % (k, shlex.quote(env[k])))
        sys.stdout.write(" ".join(shlex.quote(w) for w in command) + "\n")
        return 0
    return _exec(command, env)


if __name__ == "__main__":
    sys.exit(main())

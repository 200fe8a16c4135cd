"""The console scripts shunt-perf, shunt-plan, shunt-info and shunt-tune: each becomes the tool of
its name installed in the package's bin/, where the tools find the library through their RPATH
(a program in the environment's bin/ could not)."""

import os
import sys

import shunt


def _become(name):
    try:
        path = shunt.tool_path(name)
    except FileNotFoundError as e:
        sys.stderr.write("%s: %s\n" % (name, e))
        sys.exit(127)
    sys.stdout.flush()
    os.execv(path, [path] + sys.argv[1:])


def perf():
    _become("shunt-perf")


def plan():
    _become("shunt-plan")


def info():
    _become("shunt-info")


def tune():
    _become("shunt-tune")

"""python -m shunt run|doctor|version."""

import sys

USAGE = """usage: python -m shunt COMMAND
  run [options] -- COMMAND ...   start COMMAND with shunt preloaded (run --help)
  doctor [options]               say whether shunt will serve this machine, and why not (doctor --help)
  version                        shunt's version and where it is installed
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        from . import run

        return run.main(rest)
    if cmd == "doctor":
        from . import doctor

        return doctor.main(rest)
    if cmd in ("version", "--version"):
        import shunt

        print("shunt %s (%s)" % (shunt.version(), shunt.library_path()))
        return 0
    sys.stderr.write("shunt: unknown command %s\n%s" % (cmd, USAGE))
    return 2


if __name__ == "__main__":
    sys.exit(main())

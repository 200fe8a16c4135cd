"""`python -m shunt doctor`: whether shunt will serve this machine, and why not, in one screen.

Each line is one thing shunt depends on, as `shunt run` would set the job up: the installed
library, the real NCCL, PyTorch's NCCL and imports, the GPUs (shunt-info), the network between
hosts, the plan table (shunt-plan list), tuning and, on a GPU, the GPU self-check. The last line
is the verdict; the exit status is 0 when shunt can serve, 1 otherwise (with the reasons).
"""

import os
import re
import subprocess
import sys
import time

import shunt

from . import _nccl, _net, _plans, _torch

USAGE = """usage: python -m shunt doctor [--python PATH] [--nccl PATH] [--plans DIR] [--no-gpu-check]
  --python PATH    the interpreter whose packages (nvidia.nccl, torch) the job uses (default: this one)
  --nccl PATH      the real libnccl.so.2 to check (default: as `shunt run` finds it)
  --plans DIR      the plan folder (default: SHUNT_PLAN_DIR, else the shipped plans)
  --no-gpu-check   skip the GPU self-check (two ranks on each GPU in turn, seconds each)
"""

COLL_ORDER = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")


class Report:
    def __init__(self, out):
        self.out = out
        self.problems = []  # reasons shunt cannot serve
        self.notes = []

    def line(self, label, text):
        self.out.write("%-12s %s\n" % (label + ":", text))

    def more(self, text):
        self.out.write("%-12s %s\n" % ("", text))


def nccl_version(code):
    """NCCL_VERSION_CODE as NCCL writes it: 22809 -> 2.28.9 (1.x and 2.0-2.8 used major*1000)."""
    if code >= 10000:
        return "%d.%d.%d" % (code // 10000, code % 10000 // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, code % 1000 // 100, code % 100)


def parse_options(argv):
    opts = {"python": None, "nccl": None, "plans": None, "gpu_check": True}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            return None
        if a == "--no-gpu-check":
            opts["gpu_check"] = False
        elif a in ("--python", "--nccl", "--plans") and i + 1 < len(argv):
            opts[a[2:]] = argv[i + 1]
            i += 1
        else:
            raise ValueError("unknown or incomplete option %s" % a)
        i += 1
    return opts


def run_info(env):
    """shunt-info's lines as {label: [texts]}."""
    r = subprocess.run([shunt.tool_path("shunt-info")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                       timeout=120)
    out = {}
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        label, _, text = line.partition(":")
        out.setdefault(label.strip(), []).append(text.strip())
    if r.returncode != 0:
        out["error"] = [r.stderr.decode("utf-8", "replace").strip() or "exit %d" % r.returncode]
    return out


def gpu_covered(cc, archs, ptx):
    """Whether a GPU of compute capability `cc` ("sm_90") runs the library's kernels: a cubin of the
    same major and no higher minor, or PTX no newer than the GPU."""
    m = re.match(r"sm_(\d+)(\d)$", cc)
    if not m:
        return False
    major, minor = int(m.group(1)), int(m.group(2))
    for a in archs:
        n = re.match(r"sm_(\d+)(\d)$", a)
        if n and int(n.group(1)) == major and int(n.group(2)) <= minor:
            return True
    n = re.match(r"compute_(\d+)(\d)$", ptx or "")
    return bool(n) and (int(n.group(1)), int(n.group(2))) <= (major, minor)


def gpu_self_check(env, device=0):
    """(verdict line, passed, seconds) from two ranks as threads on one GPU under SHUNT_GPU=auto:
    `device` is its index among the GPUs this process sees, made the only one visible."""
    env = dict(env, SHUNT_DEBUG="INFO", SHUNT_DEBUG_SUBSYS="INIT", SHUNT_FALLBACK="0", SHUNT_GPU="auto")
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    env["CUDA_VISIBLE_DEVICES"] = visible[device] if device < len(visible) else str(device)
    cmd = [shunt.tool_path("shunt-perf"), "-t", "2", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0"]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=180)
    except subprocess.TimeoutExpired:
        return "no verdict: two ranks did not finish in 180 s", False, time.monotonic() - t0
    took = time.monotonic() - t0
    text = r.stdout.decode("utf-8", "replace")
    m = re.search(r"GPU self-check (passed|failed|inconclusive|not run)[^\n]*", text)
    if not m:
        return "no verdict logged (shunt-perf exit %d)" % r.returncode, False, took
    return m.group(0), m.group(1) == "passed" and r.returncode == 0, took


def main(argv=None, out=None):
    out = out or sys.stdout
    try:
        opts = parse_options(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.stderr.write("shunt doctor: %s\n%s" % (e, USAGE))
        return 2
    if opts is None:
        out.write(USAGE)
        return 0
    rep = Report(out)
    env = dict(os.environ)

    # shunt itself.
    try:
        lib = shunt.library_path()
    except FileNotFoundError as e:
        rep.line("shunt", str(e))
        rep.line("verdict", "shunt cannot serve this machine: its library is not installed")
        return 1
    try:
        from . import _build

        archs, ptx = list(_build.GPU_ARCHS), _build.PTX
    except ImportError:
        archs, ptx = [], ""
    if archs:
        code = "GPU code %s%s" % (" ".join(archs), " + PTX " + ptx if ptx else "")
    else:
        code = "no GPU code: host buffers only"
    rep.line("shunt", "%s at %s (%s)" % (shunt.version(), os.path.dirname(os.path.dirname(lib)), code))

    # The real NCCL, found as `shunt run` finds it.
    python = opts["python"]
    found = _nccl.find(explicit=opts["nccl"], python=python, env=env)
    plans = opts["plans"] or env.get("SHUNT_PLAN_DIR") or env.get("MSCCLPP_EXECUTION_PLAN_DIR") or shunt.plan_dir()
    info_env = dict(env, SHUNT_PLAN_DIR=plans)
    if found:
        info_env["SHUNT_NCCL_LIB"] = found.path
    info = run_info(info_env)
    if "error" in info or "shunt" not in info:
        rep.line("library", "shunt-info failed: %s" % info.get("error", ["no output"])[0])
        rep.problems.append("the installed library does not load")
    real = (info.get("real NCCL") or ["?"])[0]
    m = re.match(r"(.*) \(version (\d+)\)$", real)
    if found and m:
        rep.line("real NCCL", "%s, NCCL %s (%s)" % (m.group(1), nccl_version(int(m.group(2))), found.source))
    elif found:
        rep.line("real NCCL", "%s (%s) does not load: %s" % (found.path, found.source, real))
        rep.problems.append("the real NCCL does not load")
    else:
        rep.line("real NCCL", "none found (no SHUNT_NCCL_LIB, nvidia.nccl, PyTorch's folder or system NCCL)")
        rep.problems.append("no real NCCL to forward to: calls no plan serves would fail")

    # PyTorch, when the job's interpreter has it.
    torch = _torch.find(python)
    if torch is None:
        rep.line("PyTorch", "not installed for %s" % (python or sys.executable))
    else:
        n, lacking, weak = _torch.missing_imports(torch.clients, lib)
        if torch.linkage == "cpu":
            rep.line("PyTorch", "%s, a CPU build: no ProcessGroupNCCL" % torch.version)
        elif torch.linkage in ("static", "none"):
            rep.line("PyTorch", "%s does not load libnccl.so.2 (NCCL %s)" % (torch.version, "linked in" if torch.linkage == "static" else "unused"))
            rep.problems.append("PyTorch does not load libnccl.so.2, so a preloaded shunt never sees its calls")
        else:
            same = found and torch.nccl and os.path.realpath(found.path) == torch.nccl
            where = torch.nccl or "not found beside it"
            rep.line("PyTorch", "%s loads NCCL from %s%s" % (torch.version, where, "" if same or not found else " (a different one)"))
            if lacking:
                rep.more("imports %d NCCL functions; shunt lacks %d: %s" % (n, len(lacking), " ".join(lacking[:6])))
                rep.problems.append("shunt lacks NCCL functions PyTorch imports, so PyTorch would not load")
            else:
                rep.more("imports %d NCCL functions; shunt defines every one%s" % (n, " (weak ones lacking: %s)" % " ".join(weak) if weak else ""))

    # GPUs (shunt-info opens the CUDA driver as the library does).
    driver = (info.get("CUDA driver") or ["?"])[0]
    gpus = [(k, v[0]) for k, v in info.items() if re.match(r"GPU \d+$", k)]
    rep.line("GPUs", driver)
    uncovered = []
    for k, text in sorted(gpus, key=lambda kv: int(kv[0].split()[1]))[:8]:
        cc = re.search(r"\bsm_\d+", text)
        ok = bool(cc) and gpu_covered(cc.group(0), archs, ptx)
        if not ok:
            uncovered.append(k)
        rep.more("%s: %s%s" % (k, text, "" if ok else " (no kernels for it in this build)"))
    if len(gpus) > 8:
        rep.more("... and %d more" % (len(gpus) - 8))
    for label in ("peer access", "MPS"):
        if info.get(label):
            rep.more("%s: %s" % (label, info[label][0]))
    if gpus and uncovered:
        rep.problems.append("no GPU kernels for %s in this build: their device buffers go to NCCL" % ", ".join(uncovered))
    if not gpus:
        rep.notes.append("no GPU: shunt serves host buffers only")

    # The network between hosts.
    text, problem = _net.report(env)
    rep.line("network", text)
    if problem:
        rep.problems.append(problem)

    # The plan table.
    tuning = env.get("SHUNT_TUNING")
    tuning_file = tuning if tuning and tuning not in ("auto", "disable") else None
    if not os.path.isdir(plans):
        rep.line("plans", "%s does not exist" % plans)
        rep.problems.append("the plan folder %s does not exist: no plan serves any call" % plans)
    else:
        table = _plans.load(shunt.tool_path("shunt-plan"), plans, tuning_file if tuning_file and os.path.isfile(tuning_file) else None, env)
        if table.error:
            rep.line("plans", "%s: %s" % (plans, table.error))
            rep.problems.append("the plan folder cannot be read")
        else:
            rows = table.rows
            rep.line("plans", "%s: %d of %d usable" % (plans, len(table.usable()), len(rows)))
            by = table.by_collective()
            for coll in sorted(by, key=lambda c: (COLL_ORDER.index(c) if c in COLL_ORDER else 99, c)):
                cells = by[coll]
                rep.more("%-13s %s" % (coll, "  ".join("%dr %d/%d" % (n, u, t) for n, (u, t) in sorted(cells.items()))))
            bad = table.unusable()
            for r in bad[:3]:
                rep.more("unusable: %s: %s%s" % (r["file"], r["status"], ": " + r["reason"] if r["reason"] else ""))
            if len(bad) > 3:
                rep.more("... %d more unusable (shunt-plan list %s)" % (len(bad) - 3, plans))
            if not table.usable():
                rep.problems.append("no usable plan: every call would go to NCCL")

    # Tuning.
    cache = env.get("SHUNT_TUNING_CACHE")
    if tuning_file:
        exists = os.path.isfile(tuning_file)
        rep.line("tuning", "SHUNT_TUNING=%s%s" % (tuning_file, "" if exists else " does not exist: the plans' own ranges apply"))
        if not exists:
            rep.notes.append("the tuning file does not exist")
    elif tuning:
        rep.line("tuning", "SHUNT_TUNING=%s%s" % (tuning, ", cache %s" % cache if cache else ""))
    else:
        auto = shunt.tuning_auto_supported()
        rep.line("tuning", "none: the plans' own ranges%s" % ("; `shunt run` sets SHUNT_TUNING=auto" if auto else ""))

    # The GPU self-check, where there is a GPU the build has kernels for.
    if gpus and archs and not uncovered and opts["gpu_check"] and "error" not in info:
        for i, (name, _) in enumerate(gpus):
            verdict, passed, took = gpu_self_check(info_env, int(name.split()[1]))
            line = "%s: %s (%.1f s)" % (name, verdict, took)
            if i == 0:
                rep.line("GPU check", line)
            else:
                rep.more(line)
            if not passed:
                rep.problems.append("the GPU self-check did not pass on %s: its device calls go to NCCL" % name)
    elif gpus and not opts["gpu_check"]:
        rep.line("GPU check", "skipped (--no-gpu-check)")

    if rep.problems:
        rep.line("verdict", "shunt cannot serve this machine: " + "; ".join(rep.problems))
        return 1
    rep.line("verdict", "shunt can serve this machine" + ("" if not rep.notes else " (" + "; ".join(rep.notes) + ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

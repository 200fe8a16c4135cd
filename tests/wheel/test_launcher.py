"""The installed package's launcher and helpers (`python -m shunt run`, shunt.library_path() ...),
run with the Python of a virtual environment the wheel was installed into:

  VENV/bin/python tests/wheel/test_launcher.py   (SHUNT_TEST_NCCL=a real libnccl.so.2)

Each test starts the launcher as a user would (a process) unless it needs to change what the
launcher searches (then it calls run.build in this process and runs nothing)."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

import shunt
from shunt import _elf, _nccl, run

NCCL = os.environ.get("SHUNT_TEST_NCCL", "")


def launch(args, env=None, **kw):
    e = dict(os.environ)
    e.pop("SHUNT_TUNING", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "shunt", "run"] + args, env=e, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120, **kw)


def script(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def dry_env(stdout):
    """The VAR=value lines of --dry-run's output, and its command line."""
    lines = stdout.strip().splitlines()
    env = dict(line.split("=", 1) for line in lines[:-1])
    return env, lines[-1]


class Helpers(unittest.TestCase):
    def test_paths(self):
        lib = shunt.library_path()
        self.assertTrue(_elf.is_shunt(lib), lib)
        self.assertEqual(_elf.read(lib).soname, "libnccl.so.2")
        link = os.path.join(shunt.nccl_link_dir(), "libnccl.so.2")
        self.assertIn("libshunt.so", _elf.read(link).needed)
        self.assertTrue(any(n.endswith(".json") for n in os.listdir(shunt.plan_dir())))
        for tool in ("shunt-perf", "shunt-plan", "shunt-info", "shunt-tune"):
            self.assertTrue(os.access(shunt.tool_path(tool), os.X_OK), tool)

    def test_nccl_path_follows_the_variable(self):
        os.environ["SHUNT_NCCL_LIB"] = "/some/libnccl.so.2"
        try:
            self.assertEqual(shunt.nccl_path(), "/some/libnccl.so.2")
        finally:
            del os.environ["SHUNT_NCCL_LIB"]

    def test_tuning_constant(self):
        self.assertIs(shunt.tuning_auto_supported(), shunt._TUNING_AUTO)


class Launcher(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_dry_run_sets_what_it_says(self):
        r = launch(["--dry-run", "--", "true"], {"LD_PRELOAD": "/lib/x86_64-linux-gnu/libm.so.6",
                                                 "SHUNT_NCCL_LIB": NCCL})
        self.assertEqual(r.returncode, 0, r.stderr)
        env, cmd = dry_env(r.stdout)
        self.assertEqual(env["LD_PRELOAD"].split(":"), [shunt.library_path(), "/lib/x86_64-linux-gnu/libm.so.6"])
        self.assertEqual(env["SHUNT_PLAN_DIR"], shunt.plan_dir())
        self.assertNotIn("SHUNT_NCCL_LIB", env)  # the user's value stands
        if shunt.tuning_auto_supported():
            self.assertEqual(env["SHUNT_TUNING"], "auto")
        else:
            self.assertNotIn("SHUNT_TUNING", env)
        self.assertEqual(cmd, "true")
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("shunt-run: LD_PRELOAD=" + shunt.library_path()), lines[0])
        self.assertIn("SHUNT_NCCL_LIB=%s (yours)" % NCCL, lines[0])

    def test_shunt_is_not_preloaded_twice(self):
        r = launch(["--dry-run", "--", "true"], {"LD_PRELOAD": shunt.library_path(), "SHUNT_NCCL_LIB": NCCL})
        env, _ = dry_env(r.stdout)
        # Unchanged, so not printed: the value is the user's, shunt alone.
        self.assertEqual(env.get("LD_PRELOAD", shunt.library_path()), shunt.library_path())

    def test_exit_status_and_signal_pass_through(self):
        env = {"SHUNT_NCCL_LIB": NCCL}
        self.assertEqual(launch(["--", "sh", "-c", "exit 7"], env).returncode, 7)
        self.assertEqual(launch(["sh", "-c", "kill -TERM $$"], env).returncode, -15)
        # The job sees the preload (and shunt's library under it costs nothing).
        r = launch(["--", "sh", "-c", 'echo "$LD_PRELOAD"'], env)
        self.assertEqual(r.stdout.strip().split(":")[0], shunt.library_path())

    def test_missing_command(self):
        r = launch(["--", "no-such-command-anywhere"], {"SHUNT_NCCL_LIB": NCCL})
        self.assertEqual(r.returncode, 127)
        self.assertIn("shunt-run: command not found: no-such-command-anywhere", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 2, r.stderr)  # what it set, then the problem

    def test_missing_plan_folder_runs_anyway(self):
        r = launch(["--", "sh", "-c", "exit 3"], {"SHUNT_NCCL_LIB": NCCL, "SHUNT_PLAN_DIR": "/no/such/plans"})
        self.assertEqual(r.returncode, 3)
        self.assertIn("shunt-run: the plan folder /no/such/plans does not exist", r.stderr)
        r = launch(["--plans", self.tmp + "/none", "--dry-run", "true"], {"SHUNT_NCCL_LIB": NCCL})
        self.assertIn("the plan folder %s/none does not exist" % self.tmp, r.stderr)

    def test_another_interposer_is_taken_out(self):
        # An MSCCL++-style interposer: a library defining NCCL's API under another name.
        other = os.path.join(self.tmp, "libmscclpp_nccl.so")
        os.symlink(NCCL, other)
        for preload in (other, "libmscclpp_nccl.so"):  # a path, and a bare name nothing resolves
            r = launch(["--dry-run", "true"], {"SHUNT_NCCL_LIB": NCCL, "LD_PRELOAD": preload + ":/lib/x86_64-linux-gnu/libm.so.6"})
            env, _ = dry_env(r.stdout)
            self.assertEqual(env["LD_PRELOAD"].split(":"), [shunt.library_path(), "/lib/x86_64-linux-gnu/libm.so.6"])
            notes = [l for l in r.stderr.splitlines() if "interposer" in l]
            self.assertEqual(len(notes), 1, r.stderr)
            self.assertIn(preload, notes[0])

    def test_preloaded_real_nccl_becomes_the_real_one(self):
        r = launch(["--dry-run", "true"], {"LD_PRELOAD": NCCL, "SHUNT_NCCL_LIB": ""})
        env, _ = dry_env(r.stdout)
        self.assertEqual(env["LD_PRELOAD"], shunt.library_path())
        self.assertEqual(env["SHUNT_NCCL_LIB"], os.path.abspath(NCCL))

    def test_no_real_nccl_anywhere(self):
        # Nothing to find: no variable, no package, no system folder. Said once; the job runs.
        saved = _nccl.SYSTEM_DIRS
        _nccl.SYSTEM_DIRS = ()
        try:
            env = {k: v for k, v in os.environ.items() if k not in ("SHUNT_NCCL_LIB", "LD_LIBRARY_PATH", "CUDA_HOME")}
            opts, cmd = run.parse(["--", "true"])
            out_env, _, line, notes = run.build(opts, cmd, env)
        finally:
            _nccl.SYSTEM_DIRS = saved
        self.assertNotIn("SHUNT_NCCL_LIB", out_env)
        self.assertEqual(len([n for n in notes if "no real NCCL found" in n]), 1, notes)
        self.assertIn("no real NCCL", line)

    def test_nvidia_nccl_then_torch_of_the_jobs_python(self):
        # A job run by another interpreter whose packages hold NCCL: that interpreter is asked.
        venv = os.path.join(self.tmp, "venv")
        subprocess.check_call([sys.executable, "-m", "venv", "--without-pip", venv])
        site = subprocess.check_output([venv + "/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       universal_newlines=True).strip()
        os.makedirs(os.path.join(site, "torch", "lib"))
        open(os.path.join(site, "torch", "__init__.py"), "w").close()
        os.symlink(NCCL, os.path.join(site, "torch", "lib", "libnccl.so.2"))
        torchrun = script(self.tmp, "torchrun", "#!%s/bin/python\nimport sys\n" % venv)
        clean = {"SHUNT_NCCL_LIB": "", "LD_LIBRARY_PATH": "", "CUDA_HOME": ""}
        r = launch(["--dry-run", torchrun, "--nproc-per-node", "4", "train.py"], clean)
        env, _ = dry_env(r.stdout)
        self.assertEqual(env.get("SHUNT_NCCL_LIB"), os.path.join(site, "torch", "lib", "libnccl.so.2"), r.stderr)
        self.assertIn("PyTorch's library folder of %s/bin/python" % venv, r.stderr)
        # nvidia.nccl comes first (PyTorch's wheels load theirs from it).
        os.makedirs(os.path.join(site, "nvidia", "nccl", "lib"))
        os.symlink(NCCL, os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2"))
        r = launch(["--dry-run", "srun", "-N", "2", venv + "/bin/python", "train.py"], clean)
        env, _ = dry_env(r.stdout)
        self.assertEqual(env.get("SHUNT_NCCL_LIB"), os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2"), r.stderr)

    def test_open_mpi_is_told_to_pass_the_variables(self):
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir)
        script(bin_dir, "mpirun", '#!/bin/sh\n[ "$1" = --version ] && { echo "mpirun (Open MPI) 4.1.4"; exit 0; }\n'
                                  'printf "%s\\n" "$@"\n')
        path = bin_dir + ":" + os.environ["PATH"]
        r = launch(["--nccl", NCCL, "mpirun", "-np", "2", "-x", "SHUNT_PLAN_DIR", "prog"],
                   {"PATH": path, "SHUNT_NCCL_LIB": "", "SHUNT_FALLBACK": "0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        args = r.stdout.split()
        # What shunt-run set first, then the user's own SHUNT_* settings.
        self.assertEqual(args[:4], ["-x", "LD_PRELOAD", "-x", "SHUNT_NCCL_LIB"], r.stdout)
        self.assertEqual(args[args.index("SHUNT_FALLBACK") - 1], "-x", r.stdout)
        self.assertEqual(args.count("SHUNT_PLAN_DIR"), 1)  # already passed by the user
        self.assertEqual(args[-5:], ["-np", "2", "-x", "SHUNT_PLAN_DIR", "prog"])
        self.assertIn("mpirun: added -x LD_PRELOAD -x SHUNT_NCCL_LIB", r.stderr)
        # Another MPI's mpiexec passes the environment itself: its command line is left alone.
        script(bin_dir, "mpiexec", '#!/bin/sh\n[ "$1" = --version ] && { echo "HYDRA build details:"; exit 0; }\n'
                                   'printf "%s\\n" "$@"\n')
        r = launch(["mpiexec", "-n", "2", "prog"], {"PATH": path, "SHUNT_NCCL_LIB": NCCL})
        self.assertEqual(r.stdout.split(), ["-n", "2", "prog"])
        self.assertNotIn(" -x ", r.stderr)  # (a temporary path may hold "-x")

    def test_user_tuning_stands_and_auto_needs_the_library(self):
        opts, cmd = run.parse(["true"])
        env = dict(os.environ, SHUNT_NCCL_LIB=NCCL)
        env.pop("SHUNT_TUNING", None)
        saved = shunt._TUNING_AUTO
        try:
            shunt._TUNING_AUTO = False
            self.assertNotIn("SHUNT_TUNING", run.build(opts, cmd, env)[0])
            shunt._TUNING_AUTO = True
            self.assertEqual(run.build(opts, cmd, env)[0]["SHUNT_TUNING"], "auto")
            self.assertEqual(run.build(opts, cmd, dict(env, SHUNT_TUNING="/my/tuning"))[0]["SHUNT_TUNING"], "/my/tuning")
        finally:
            shunt._TUNING_AUTO = saved


class Doctor(unittest.TestCase):
    def doctor(self, env):
        e = dict(os.environ, SHUNT_NCCL_LIB=NCCL)
        e.update(env)
        return subprocess.run([sys.executable, "-m", "shunt", "doctor", "--no-gpu-check"], env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)

    def test_a_missing_plan_folder_is_a_reason(self):
        r = self.doctor({"SHUNT_PLAN_DIR": "/no/such/plans"})
        self.assertEqual(r.returncode, 1, r.stdout)
        last = r.stdout.strip().splitlines()[-1]
        self.assertRegex(last, r"^verdict: +shunt cannot serve this machine: the plan folder /no/such/plans does not exist")

    def test_a_real_nccl_that_does_not_load_is_a_reason(self):
        r = self.doctor({"SHUNT_NCCL_LIB": "/no/such/libnccl.so.2"})
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("the real NCCL does not load", r.stdout.strip().splitlines()[-1])

    def test_a_plan_that_fails_its_checks_is_listed(self):
        plans = tempfile.mkdtemp()
        try:
            shutil.copy(os.path.join(shunt.plan_dir(), "allreduce_2r_ll_inplace.json"), plans)
            with open(os.path.join(plans, "broken.json"), "w") as f:
                f.write("{ not json")
            r = self.doctor({"SHUNT_PLAN_DIR": plans})
        finally:
            shutil.rmtree(plans)
        self.assertEqual(r.returncode, 0, r.stdout)  # one usable plan is enough to serve
        self.assertRegex(r.stdout, r"plans: +%s: 1 of 2 usable" % plans)
        self.assertRegex(r.stdout, r"unusable: broken.json: rejected")


if __name__ == "__main__":
    if not NCCL or not os.path.isfile(NCCL):
        sys.exit("set SHUNT_TEST_NCCL to a real libnccl.so.2")
    unittest.main()

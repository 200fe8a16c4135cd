"""The plan table as the library would load it (`shunt-plan list --tsv`), summed up by collective
and rank count for a report that fits a screen."""

import subprocess


class PlanTable:
    def __init__(self):
        self.rows = []  # dicts with the columns of `shunt-plan list --tsv`
        self.error = None  # why the folder could not be listed

    def usable(self):
        return [r for r in self.rows if r["status"] == "ok"]

    def by_collective(self):
        """{coll: {ranks: [usable, total]}} over the plans that parsed."""
        out = {}
        for r in self.rows:
            if r["coll"] == "-":
                continue
            cell = out.setdefault(r["coll"], {}).setdefault(int(r["ranks"]), [0, 0])
            cell[1] += 1
            cell[0] += r["status"] == "ok"
        return out

    def unusable(self):
        return [r for r in self.rows if r["status"] != "ok"]


def load(tool, folder, tuning=None, env=None, timeout=120):
    t = PlanTable()
    cmd = [tool, "list", "--tsv"] + (["--tuning", tuning] if tuning else []) + [folder]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        t.error = "shunt-plan list did not run: %s" % e
        return t
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip().splitlines()
        t.error = err[0] if err else "shunt-plan list failed (exit %d)" % r.returncode
        return t
    lines = r.stdout.decode("utf-8", "replace").splitlines()
    if not lines:
        return t
    head = lines[0].split("\t")
    for line in lines[1:]:
        cols = line.split("\t")
        if len(cols) == len(head):
            t.rows.append(dict(zip(head, cols)))
    return t

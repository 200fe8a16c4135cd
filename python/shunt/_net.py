"""The network shunt uses between hosts (SHUNT_NET, README's table): the verbs transport where
libibverbs loads and a port is active, else TCP over SHUNT_SOCKET_IFNAME or the first interface that
is not loopback. Read from sysfs, as the library's choice depends on nothing else here."""

import ctypes
import os
import socket

SYSFS_IB = "/sys/class/infiniband"
SYSFS_NET = "/sys/class/net"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def verbs_ports(root=SYSFS_IB):
    """[(device:port, link layer, state)] for every verbs port the kernel lists."""
    out = []
    try:
        devs = sorted(os.listdir(root))
    except OSError:
        return out
    for d in devs:
        ports = os.path.join(root, d, "ports")
        try:
            nums = sorted(os.listdir(ports), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            continue
        for p in nums:
            state = _read(os.path.join(ports, p, "state"))  # e.g. "4: ACTIVE"
            layer = _read(os.path.join(ports, p, "link_layer")) or "?"
            out.append(("%s:%s" % (d, p), layer, state.split(":", 1)[-1].strip() or "?"))
    return out


def _verbs_loads(env):
    name = env.get("SHUNT_IB_LIB") or "libibverbs.so.1"
    try:
        ctypes.CDLL(name)
        return name, True
    except OSError:
        return name, False


def tcp_interface(env, root=SYSFS_NET):
    """The interface TCP would use, and how it was chosen."""
    if env.get("SHUNT_SOCKET_IFNAME"):
        return env["SHUNT_SOCKET_IFNAME"], "as SHUNT_SOCKET_IFNAME says"
    try:
        names = [n for _, n in sorted(socket.if_nameindex())]
    except OSError:
        names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    for n in names:
        if n != "lo" and _read(os.path.join(root, n, "operstate")) in ("up", "unknown", ""):
            return n, "the first interface that is not loopback"
    return None, "no interface but loopback"


def report(env):
    """(one line for the report, problem or None)."""
    mode = env.get("SHUNT_NET", "auto") or "auto"
    ifname, how = tcp_interface(env)
    tcp = "TCP over %s, %s" % (ifname, how) if ifname else "TCP: %s" % how
    if mode == "socket":
        return "SHUNT_NET=socket: " + tcp, None if ifname else "no network interface for TCP between hosts"
    active = [p for p in verbs_ports() if p[2] == "ACTIVE"]
    lib, loads = _verbs_loads(env)
    if active and loads:
        ports = ", ".join("%s (%s)" % (p[0], p[1]) for p in active[:4]) + (" ..." if len(active) > 4 else "")
        return "SHUNT_NET=%s: verbs on %s, where every rank has an active port; else %s" % (mode, ports, tcp), None
    why = "no verbs port is active" if loads else "%s does not load" % lib
    if mode == "ib":
        return "SHUNT_NET=ib: %s" % why, "SHUNT_NET=ib and %s: a world across hosts fails" % why
    return "SHUNT_NET=%s: %s; %s" % (mode, tcp, why), None

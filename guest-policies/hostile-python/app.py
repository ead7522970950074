"""A deliberately misbehaving decorator in Python, for the operator's tests of the sandbox with
a language runtime inside: the same modes as the Rust one (`../hostile`) where Python can
express them, chosen by the settings document `{"mode": "<mode>"}`.

| mode         | decorate-pod                                                          |
|--------------|-----------------------------------------------------------------------|
| `loop`       | never returns                                                         |
| `memory`     | keeps allocating 16 MiB blocks                                        |
| `sleep`      | `time.sleep(3600)`                                                    |
| `read-file`  | annotation `hostile/read-file`: `denied` or what it read     |
| `network`    | annotation `hostile/network`: `denied` or `connected`        |
| `env`        | annotation `hostile/env`: the number of environment variables         |
| `subprocess` | annotation `hostile/subprocess`: `denied` or its exit code        |
| `big-output` | the pod after 2 MiB of spaces                                         |
| `raise`      | raises an exception of its own                                        |
| `ok`         | the pod unchanged                                                     |
"""

import os
import socket
import time

import tfjob_policy as tp

MODES = ("loop", "memory", "sleep", "read-file", "network", "env", "subprocess", "big-output",
         "raise", "ok")


def attempt(action) -> str:
    """What `action` returned, or `denied` (the exception goes to the log)."""
    try:
        return str(action())
    except BaseException as e:  # noqa: BLE001 - the report is the point
        tp.log.warn("denied", error=f"{type(e).__name__}: {e}"[:200])
        return "denied"


def read_file():
    with open("/etc/passwd") as f:
        return f.read(64)


def connect():
    with socket.create_connection(("127.0.0.1", 80), timeout=1):
        return "connected"


def run_subprocess():
    import subprocess

    return subprocess.run(["/bin/true"], check=False).returncode


class Hostile(tp.Policy):
    def settings(self, reader):
        mode = reader.string("mode", "ok")
        reader.done()
        if mode not in MODES:
            raise tp.InvalidSettings(f"mode: {mode!r} is not one of {', '.join(MODES)}")
        return mode

    def decorate(self, ctx, mode, pod):
        if mode == "loop":
            n = 0
            while True:
                n += 1
        if mode == "memory":
            # Large blocks: filling 1 MiB ones took long enough that a loaded machine reached
            # the deadline (timeout) before the memory cap.
            hoard = []
            while True:
                hoard.append(bytearray(1 << 24))
        if mode == "sleep":
            time.sleep(3600)
        if mode == "raise":
            raise LookupError("the policy's own bug")
        reports = {
            "read-file": read_file,
            "network": connect,
            "env": lambda: len(os.environ),
            "subprocess": run_subprocess,
        }
        if mode in reports:
            tp.pod.annotations(pod)[f"hostile/{mode}"] = attempt(reports[mode])
        return pod


hooks = tp.exports(Hostile())
Settings = hooks.Settings


class Decorate(hooks.Decorate):
    def decorate_pod(self, ctx, settings, pod):
        if tp.parsed(settings, Hostile().settings) == "big-output":
            return " " * (2 << 20) + pod
        return super().decorate_pod(ctx, settings, pod)

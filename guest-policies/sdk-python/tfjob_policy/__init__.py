"""The TFJob operator's policy SDK for Python.

A policy is a WebAssembly component built with componentize-py from one world of the
`tfjob:policy@0.3.0` contract. Write a `Policy` subclass, then export its hooks from the app
module:

    import tfjob_policy as tp

    class TeamLabels(tp.Policy):
        def settings(self, reader):
            team = reader.string("team", None)
            reader.done()
            return team

        def decorate(self, ctx, team, pod):
            if team:
                tp.pod.labels(pod)["team"] = team
            return pod

    hooks = tp.exports(TeamLabels())
    Settings, Decorate = hooks.Settings, hooks.Decorate
"""

from . import cluster, log, pod
from .context import Context
from .errors import Failed, InvalidInput, InvalidSettings, PolicyError
from .hooks import Policy, exports, parse_time
from .settings import SettingsReader, is_label_key, is_label_value, is_quantity, parsed
from .verdict import Verdict, from_pod_phase

__all__ = [
    "Context",
    "Failed",
    "InvalidInput",
    "InvalidSettings",
    "Policy",
    "PolicyError",
    "SettingsReader",
    "Verdict",
    "cluster",
    "exports",
    "from_pod_phase",
    "is_label_key",
    "is_label_value",
    "is_quantity",
    "log",
    "parse_time",
    "parsed",
    "pod",
]

"""oom-permanent in Python: a failed pod whose container ended for a reason listed in the
settings (e.g. `OOMKilled`) fails permanently; running it again would not help. Other pods are
read from their phase.

Settings: `{"permanentReasons": ["OOMKilled"]}`.
Build: `python3 build.py` (componentize-py, world `classifier`).
"""

import tfjob_policy as tp


class OomPermanent(tp.Policy):
    def settings(self, reader: tp.SettingsReader):
        reasons = reader.strings("permanentReasons", [])
        reader.done()
        for i, reason in enumerate(reasons):
            if reason == "":
                raise tp.InvalidSettings(f"permanentReasons[{i}]: must not be empty")
        return frozenset(reasons)

    def classify(self, ctx: tp.Context, reasons, pod, now):
        phase = tp.pod.phase(pod)
        reason = tp.pod.terminated_reason(pod) if phase == "Failed" else None
        if reason in reasons:
            return tp.Verdict(
                phase="permanent-failure",
                reason=reason,
                message=f"a container ended with {reason}; running it again would not help",
                kind="user",
            )
        return tp.from_pod_phase(phase, reason=reason or "")


hooks = tp.exports(OomPermanent())
Settings, Classify = hooks.Settings, hooks.Classify

"""A classification: where a pod stands, and for failures whose fault it is."""

from dataclasses import dataclass
from typing import Optional

#: The contract's phases, spelled as in the WIT.
PHASES = (
    "undefined",
    "queued",
    "waiting-for-resources",
    "initializing",
    "running",
    "succeeded",
    "retryable-failure",
    "permanent-failure",
)

#: Whose fault a failure is.
KINDS = ("user", "system")


@dataclass(frozen=True)
class Verdict:
    """The contract's `verdict`. `occurred_at` and `recheck_at` are RFC 3339 text."""

    phase: str
    reason: str = ""
    message: str = ""
    #: Set on failures only: `user` or `system`.
    kind: Optional[str] = None
    occurred_at: Optional[str] = None
    #: When time alone may change this verdict; `None`: only a change of the pod can.
    recheck_at: Optional[str] = None

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"verdict phase {self.phase!r}: expected one of {', '.join(PHASES)}")
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"verdict kind {self.kind!r}: expected user or system")


def from_pod_phase(pod_phase: str, reason: str = "", message: str = "") -> Verdict:
    """The plain reading of a pod's `status.phase`: `Failed` is a retryable user failure."""
    mapping = {
        "Pending": "queued",
        "Running": "running",
        "Succeeded": "succeeded",
        "Failed": "retryable-failure",
    }
    phase = mapping.get(pod_phase, "undefined")
    kind = "user" if phase == "retryable-failure" else None
    return Verdict(phase=phase, reason=reason or pod_phase, message=message, kind=kind)

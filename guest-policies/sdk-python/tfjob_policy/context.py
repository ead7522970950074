"""What a policy knows about the pod's job and replica, as a plain Python object."""

from dataclasses import dataclass, field
from typing import Any, Dict


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which costs a
# measurable part of a call in CPython compiled to WebAssembly.
@dataclass(slots=True)
class Context:
    """The contract's `job-context`, with labels and annotations as dicts."""

    job_name: str
    namespace: str
    job_uid: str = ""
    job_labels: Dict[str, str] = field(default_factory=dict)
    job_annotations: Dict[str, str] = field(default_factory=dict)
    #: `Chief`, `Master`, `PS`, `Worker` or `Evaluator`, as spelled in `tfReplicaSpecs`.
    replica_type: str = "Worker"
    replica_index: int = 0
    replica_count: int = 1
    #: How many times the operator has restarted this replica index (0 on the first run).
    attempt: int = 0

    @classmethod
    def from_wit(cls, ctx: Any) -> "Context":
        """From the generated bindings' `JobContext`."""
        return cls(
            job_name=ctx.job_name,
            namespace=ctx.namespace,
            job_uid=ctx.job_uid,
            job_labels=dict(ctx.job_labels),
            job_annotations=dict(ctx.job_annotations),
            replica_type=ctx.replica_type,
            replica_index=ctx.replica_index,
            replica_count=ctx.replica_count,
            attempt=ctx.attempt,
        )

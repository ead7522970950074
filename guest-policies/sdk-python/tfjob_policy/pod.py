"""Pods and resource requirements as JSON documents, and the few accessors policies need.

A hook receives the Kubernetes API's JSON and returns it; the SDK decodes it to plain dicts and
lists and encodes the result again, so a policy edits the pod in place and everything it does
not touch is returned as it came.
"""

import json
from typing import Any, Dict, List, Optional

from .errors import InvalidInput


def decode(text: str, what: str) -> Dict[str, Any]:
    """`text` as a JSON object; empty text is `{}`; anything else is `invalid-input`."""
    if text.strip() == "":
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{what}: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{what}: expected an object")
    return value


# One encoder for every call: `json.dumps` with options builds a new one each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode(value: Dict[str, Any]) -> str:
    return _ENCODER.encode(value)


def _object(parent: Dict[str, Any], key: str, path: str) -> Dict[str, Any]:
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{path}: expected an object")
    return value


def labels(pod: Dict[str, Any]) -> Dict[str, str]:
    """`metadata.labels`, created when absent: set a key to label the pod."""
    return _object(_object(pod, "metadata", "pod.metadata"), "labels", "pod.metadata.labels")


def annotations(pod: Dict[str, Any]) -> Dict[str, str]:
    """`metadata.annotations`, created when absent."""
    metadata = _object(pod, "metadata", "pod.metadata")
    return _object(metadata, "annotations", "pod.metadata.annotations")


def containers(pod: Dict[str, Any]) -> List[Dict[str, Any]]:
    """`spec.containers` (empty when absent)."""
    value = (pod.get("spec") or {}).get("containers") or []
    if not isinstance(value, list):
        raise InvalidInput("pod.spec.containers: expected a list")
    return value


def phase(pod: Dict[str, Any]) -> str:
    """`status.phase`, `Unknown` when absent."""
    return str((pod.get("status") or {}).get("phase") or "Unknown")


def terminated_reason(pod: Dict[str, Any]) -> Optional[str]:
    """The reason of the first container that terminated with a non-zero exit code, e.g.
    `OOMKilled` or `Error`; `None` when none did."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = ((status or {}).get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode", 0) != 0:
            return str(terminated.get("reason") or "Error")
    return None

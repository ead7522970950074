"""Reads a pod's log with the official Kubernetes Python client.

Usage: read_pod_log.py KUBECONFIG NAMESPACE POD CONTAINER

Prints one JSON object: the whole log, the log with tail_lines=2, and the status and message
of a request for a container the pod does not have, so the calling test checks what the
client saw.
"""

import json
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException


def main() -> None:
    kubeconfig, namespace, pod, container = sys.argv[1:5]
    config.load_kube_config(config_file=kubeconfig)
    api = client.CoreV1Api()
    whole = api.read_namespaced_pod_log(pod, namespace, container=container)
    tail = api.read_namespaced_pod_log(pod, namespace, container=container, tail_lines=2)
    try:
        api.read_namespaced_pod_log(pod, namespace, container="nope")
        error = None
    except ApiException as e:
        error = {"status": e.status, "message": json.loads(e.body)["message"]}
    json.dump({"whole": whole, "tail": tail, "error": error}, sys.stdout)


if __name__ == "__main__":
    main()

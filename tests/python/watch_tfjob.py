"""Watches a TFJob run with the official Kubernetes Python client, as ML tooling does.

Usage: watch_tfjob.py KUBECONFIG NAMESPACE JOB

Three watches run at once while one TFJob of a chief and a worker runs to the end: the
TFJob through the custom objects API, the job's pods through a label selector, and the
namespace's events. Each watch asks for short streams (timeout_seconds) and resumes each
new one from the last resourceVersion it saw, as a long-lived watcher does; a pod of another
job in the namespace must never reach the pod watch.

Checks made here, each a failed assertion with what was seen: every stream's events come in
resourceVersion order with none seen twice; every watch was resumed at least once; the job's
conditions came Created, Running, Succeeded in that order; each pod's phases only moved
forward to Succeeded; the events of the job came in order too (pods created before the job
succeeded). Prints one JSON object with what each watch saw, for the calling test.
"""

import json
import sys
import threading
import time

from kubernetes import client, config, watch

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
STREAM_SECONDS = 2
DEADLINE_SECONDS = 120
PHASE_ORDER = ["Pending", "Running", "Succeeded"]


def tfjob(name, replicas):
    def replica(count):
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": {"sim.tfjob.dev/duration": "4s"}},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]},
            },
        }

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {kind: replica(n) for kind, n in replicas.items()}},
    }


class Resuming:
    """One watch, made of short streams each resumed from the last resourceVersion seen."""

    def __init__(self, name, list_fn, start_rv, done, **kwargs):
        self.name = name
        self.list_fn = list_fn
        self.rv = start_rv
        self.done = done
        self.kwargs = kwargs
        self.events = []
        self.streams = 0
        self.error = None

    def run(self):
        try:
            deadline = time.monotonic() + DEADLINE_SECONDS
            while not self.done(self.events) and time.monotonic() < deadline:
                self.streams += 1
                for event in watch.Watch().stream(
                    self.list_fn,
                    resource_version=self.rv,
                    timeout_seconds=STREAM_SECONDS,
                    **self.kwargs,
                ):
                    obj = event["raw_object"]
                    rv = int(obj["metadata"]["resourceVersion"])
                    assert rv > int(self.rv), (
                        f"{self.name}: event {event['type']} at resourceVersion {rv} "
                        f"after {self.rv}: out of order or seen twice"
                    )
                    self.rv = str(rv)
                    self.events.append((event["type"], obj))
                    if self.done(self.events):
                        break
        except Exception as e:  # reported by the main thread
            self.error = f"{self.name}: {type(e).__name__}: {e}"


def conditions_seen(events):
    """The job's condition types with status True, in the order they first appeared."""
    seen = []
    for _, obj in events:
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("status") == "True" and c["type"] not in seen:
                seen.append(c["type"])
    return seen


def main():
    kubeconfig, namespace, name = sys.argv[1:4]
    config.load_kube_config(config_file=kubeconfig)
    custom = client.CustomObjectsApi()
    core = client.CoreV1Api()

    start_rv = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
        "metadata"
    ]["resourceVersion"]
    selector = f"training.kubeflow.org/job-name={name}"

    def job_done(events):
        return "Succeeded" in conditions_seen(events)

    def pods_done(events):
        last = {}
        for _, obj in events:
            last[obj["metadata"]["name"]] = (obj.get("status") or {}).get("phase")
        return len(last) == 2 and all(p == "Succeeded" for p in last.values())

    def events_done(events):
        return any(
            obj.get("reason") == "TFJobSucceeded"
            and obj["involvedObject"]["name"] == name
            for _, obj in events
        )

    watches = [
        Resuming(
            "tfjobs",
            custom.list_namespaced_custom_object,
            start_rv,
            job_done,
            group=GROUP,
            version=VERSION,
            namespace=namespace,
            plural=PLURAL,
        ),
        Resuming(
            "pods",
            core.list_namespaced_pod,
            start_rv,
            pods_done,
            namespace=namespace,
            label_selector=selector,
        ),
        Resuming("events", core.list_namespaced_event, start_rv, events_done, namespace=namespace),
    ]
    threads = [threading.Thread(target=w.run) for w in watches]
    for t in threads:
        t.start()
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, tfjob(name, {"Chief": 1, "Worker": 1})
    )
    # Another job's pods share the namespace; the label selector keeps them out.
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, tfjob(name + "-other", {"Worker": 1})
    )
    for t in threads:
        t.join()
    errors = [w.error for w in watches if w.error]
    assert not errors, errors
    job, pods, events = watches

    assert job_done(job.events), f"the TFJob never succeeded: {conditions_seen(job.events)}"
    order = [c for c in conditions_seen(job.events) if c in ("Created", "Running", "Succeeded")]
    assert order == ["Created", "Running", "Succeeded"], order
    assert job.events[0][0] == "ADDED", job.events[0][0]

    phases = {}
    for kind, obj in pods.events:
        labels = obj["metadata"].get("labels") or {}
        assert labels.get("training.kubeflow.org/job-name") == name, (
            f"a pod of another job reached the watch: {obj['metadata']['name']}"
        )
        pod = obj["metadata"]["name"]
        phase = (obj.get("status") or {}).get("phase") or "Pending"
        seen = phases.setdefault(pod, [])
        if not seen:
            assert kind == "ADDED", f"{pod}: first event {kind}"
        if not seen or seen[-1] != phase:
            seen.append(phase)
    for pod, seen in phases.items():
        ranks = [PHASE_ORDER.index(p) for p in seen]
        assert ranks == sorted(ranks) and seen[-1] == "Succeeded", f"{pod}: phases {seen}"

    reasons = [
        obj.get("reason")
        for _, obj in events.events
        if obj["involvedObject"]["name"] == name and obj["involvedObject"]["kind"] == "TFJob"
    ]
    assert "SuccessfulCreatePod" in reasons and reasons[-1] == "TFJobSucceeded", reasons
    assert reasons.index("SuccessfulCreatePod") < reasons.index("TFJobSucceeded"), reasons

    for w in watches:
        assert w.streams > 1, f"{w.name}: never resumed ({w.streams} stream)"

    json.dump(
        {
            "conditions": order,
            "pod_phases": phases,
            "event_reasons": reasons,
            "streams": {w.name: w.streams for w in watches},
            "events": {w.name: len(w.events) for w in watches},
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()

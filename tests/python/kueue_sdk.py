"""Queues TFJobs through Kueue with the Kubeflow SDK (kubeflow-training 1.9), as an ML engineer
submits them.

Usage: kueue_sdk.py KUBECONFIG NAMESPACE QUEUE COUNT

COUNT jobs of one PS and two workers (1 cpu each) are created with TrainingClient.create_job
in the LocalQueue QUEUE, more than its ClusterQueue admits at once. The script then polls
with the SDK's own calls (get_job_conditions, is_job_running, is_job_succeeded) until every
job has succeeded, waiting on the last with wait_for_job_conditions. Checks made here, each a
failed assertion with what was seen: no job runs before it was admitted (a waiting job shows
Suspended=True and no Running=True at once), every job ends Succeeded, and no job ever shows
Restarting. Prints one JSON object with what the SDK saw, for the calling test to judge the
quota (the most jobs seen running at once) and the waiting messages.
"""

import json
import sys
import time

from kubeflow.training import TrainingClient
from kubeflow.training.models import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
)
from kubernetes import client

DEADLINE_SECONDS = 120


def tfjob(name, namespace, queue):
    def replica(count):
        container = client.V1Container(
            name="tensorflow",
            image="kubeflow/tf-dist-mnist-test:latest",
            resources=client.V1ResourceRequirements(requests={"cpu": "1", "memory": "200Mi"}),
        )
        template = client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(annotations={"sim.tfjob.dev/duration": "2s"}),
            spec=client.V1PodSpec(containers=[container]),
        )
        return KubeflowOrgV1ReplicaSpec(replicas=count, restart_policy="Never", template=template)

    return KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, labels={"kueue.x-k8s.io/queue-name": queue}
        ),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            tf_replica_specs={"PS": replica(1), "Worker": replica(2)},
        ),
    )


def main():
    kubeconfig, namespace, queue, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sdk = TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="TFJob")
    names = [f"sdk-{i}" for i in range(count)]
    for name in names:
        sdk.create_job(job=tfjob(name, namespace, queue))

    most_running = 0
    waiting = {}
    restarting = []
    start = time.monotonic()
    while True:
        running = 0
        done = 0
        for name in names:
            conditions = {c.type: c for c in sdk.get_job_conditions(name=name) or []}
            is_true = {t: c.status == "True" for t, c in conditions.items()}
            suspended = is_true.get("Suspended", False)
            assert not (suspended and is_true.get("Running", False)), (name, conditions)
            if suspended:
                waiting.setdefault(name, conditions["Suspended"].message)
            if is_true.get("Restarting", False):
                restarting.append(name)
            if sdk.is_job_running(name=name):
                running += 1
            if sdk.is_job_succeeded(name=name):
                done += 1
        most_running = max(most_running, running)
        if done == count:
            break
        assert time.monotonic() - start < DEADLINE_SECONDS, f"{done} of {count} succeeded"
        time.sleep(0.2)
    last = sdk.wait_for_job_conditions(name=names[-1], wait_timeout=60, polling_interval=1)
    assert last.status.conditions[-1].type == "Succeeded", last.status.conditions
    assert not restarting, restarting
    print(json.dumps({"most_running": most_running, "waiting": waiting, "succeeded": count}))


if __name__ == "__main__":
    main()

"""Runs a TFJob through the Kubeflow SDK (kubeflow-training 1.9) as an ML engineer does, with no
queue and no gang scheduler.

Usage: sdk_plain.py KUBECONFIG NAMESPACE

A job of one PS and two workers is created with TrainingClient.create_job, followed with the
SDK's own calls (wait_for_job_conditions for Created then Succeeded, get_job_conditions,
is_job_succeeded, list_jobs, get_job_pod_names for all pods, the chief-or-master selection and a
replica), then deleted with delete_job. Checks made here, each a failed assertion with what was
seen; prints one JSON object with what the SDK saw, for the calling test to judge.
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

NAME = "sdk-plain"
DEADLINE_SECONDS = 120


def tfjob(namespace):
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
        metadata=client.V1ObjectMeta(name=NAME, namespace=namespace),
        spec=KubeflowOrgV1TFJobSpec(
            # The SDK's model insists on a run policy; pods are kept to be listed after the end.
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            tf_replica_specs={"PS": replica(1), "Worker": replica(2)},
        ),
    )


def main():
    kubeconfig, namespace = sys.argv[1], sys.argv[2]
    sdk = TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="TFJob")
    sdk.create_job(job=tfjob(namespace))
    sdk.wait_for_job_conditions(
        name=NAME, expected_conditions={"Created"}, wait_timeout=DEADLINE_SECONDS, polling_interval=1
    )
    pods = []
    start = time.monotonic()
    while len(pods) < 3:
        assert time.monotonic() - start < DEADLINE_SECONDS, pods
        pods = sorted(sdk.get_job_pod_names(name=NAME))
        time.sleep(0.2)
    worker_1 = sdk.get_job_pod_names(name=NAME, replica_type="worker", replica_index=1)
    chief = sdk.get_job_pod_names(name=NAME, is_master=True)
    finished = sdk.wait_for_job_conditions(
        name=NAME, wait_timeout=DEADLINE_SECONDS, polling_interval=1
    )
    conditions = [c.type for c in sdk.get_job_conditions(name=NAME)]
    assert sdk.is_job_succeeded(name=NAME), conditions
    listed = [job.metadata.name for job in sdk.list_jobs()]
    sdk.delete_job(name=NAME)
    start = time.monotonic()
    while NAME in [job.metadata.name for job in sdk.list_jobs()]:
        assert time.monotonic() - start < DEADLINE_SECONDS, "the job was never deleted"
        time.sleep(0.2)
    print(
        json.dumps(
            {
                "pods": pods,
                "worker_1": worker_1,
                "chief": chief,
                "conditions": conditions,
                "last": finished.status.conditions[-1].type,
                "listed": listed,
            }
        )
    )


if __name__ == "__main__":
    main()

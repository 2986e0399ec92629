"""deploy/kubernetes/raftq.yaml against the Kubernetes API schemas, offline.

kubernetes-validate bundles the OpenAPI schemas of each Kubernetes release (strict: unknown
fields are errors). Beyond the schema, the manifest must hold what running raftq needs: a
headless service that publishes not-ready pods (peers find each other before any is ready),
persistent volumes, gRPC readiness on the client port, a disruption budget that keeps a
majority, and the cluster secret from a Secret, never inline.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from raftq.config import load_config

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "raftq.yaml"
KUBERNETES_VERSION = "1.30.0"


def documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_resource_is_valid_for_kubernetes(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_broken_resource_is_refused() -> None:
    """The validator does catch mistakes (so the test above can fail)."""
    (statefulset,) = [d for d in documents() if d["kind"] == "StatefulSet"]
    statefulset["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)


def test_the_statefulset_has_what_a_raft_cluster_needs() -> None:
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in documents()}
    statefulset = by_kind["StatefulSet", "raftq"]
    peers = by_kind["Service", "raftq-peers"]
    assert statefulset["spec"]["serviceName"] == "raftq-peers"
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["publishNotReadyAddresses"]
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    (broker,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert broker["readinessProbe"]["grpc"]["port"] == 7070
    assert "livenessProbe" in broker
    assert {"mountPath": "/var/lib/raftq", "name": "data"} in broker["volumeMounts"]
    secret = next(e for e in broker["env"] if e["name"] == "RAFTQ_BROKER__CLUSTER_SECRET")
    assert secret["valueFrom"]["secretKeyRef"]["name"] == "raftq-cluster-secret"
    assert "cluster_secret" not in by_kind["ConfigMap", "raftq-config"]["data"]["broker.yaml"]
    assert by_kind["PodDisruptionBudget", "raftq"]["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("pod", ["raftq-0", "raftq-1", "raftq-4"])
def test_the_start_script_makes_a_valid_broker_config_for_each_pod(
    pod: str, tmp_path: Path
) -> None:
    """Run the container's shell script (up to its exec) for a pod and load what it sets."""
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in documents()}
    (broker,) = by_kind["StatefulSet", "raftq"]["spec"]["template"]["spec"]["containers"]
    script = broker["args"][0].replace("exec raftq serve", "env | grep ^RAFTQ_ #")
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": pod, "POD_NAMESPACE": "jobs", "NODE_NAME": "n7"}
    done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    settings = dict(line.split("=", 1) for line in done.stdout.splitlines())
    settings["RAFTQ_BROKER__CLUSTER_SECRET"] = "k8s-secret-" + "x" * 32
    config_file = tmp_path / "broker.yaml"
    config_file.write_text(by_kind["ConfigMap", "raftq-config"]["data"]["broker.yaml"])
    config = load_config(config_file, env=settings)
    ordinal = int(pod.rsplit("-", 1)[1])
    host = f"{pod}.raftq-peers.jobs.svc.cluster.local"
    assert config.broker.id == ordinal + 1 and config.broker.rack == "n7"
    assert config.broker.raft_addr == f"{host}:9070"
    assert config.broker.seeds == tuple(
        f"raftq-{i}.raftq-peers.jobs.svc.cluster.local:9070" for i in range(3)
    )
    assert bool(config.broker.join_addrs) == (ordinal >= 3)
    assert config.log.format == "json" and config.broker.data_dir == "/var/lib/raftq"

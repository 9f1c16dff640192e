"""kubernetes parser: `kubectl get pod -o json` and `kubectl get events -o json`."""
from __future__ import annotations

import copy
import json
import random
from datetime import datetime, timezone

import pytest

from triage.errors import BadInput
from triage.evidence import alertmanager, kubernetes, memory_stats, nvidia_smi
from triage.evidence.base import InputFile, ParseContext
from triage.evidence.kinds import Kind
from triage.timeref import default_reference

# `kubectl get pod vllm-llama-70b-6d9f7c8b5-x2kqp -n inference -o json` after a restart: the last
# run was OOM-killed (host RAM: 96Gi limit, --swap-space 64), the init container completed.
POD = r"""{
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "creationTimestamp": "2025-03-11T09:12:04Z",
        "generateName": "vllm-llama-70b-6d9f7c8b5-",
        "labels": {
            "app": "vllm-llama-70b",
            "pod-template-hash": "6d9f7c8b5"
        },
        "name": "vllm-llama-70b-6d9f7c8b5-x2kqp",
        "namespace": "inference",
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": true,
                "controller": true,
                "kind": "ReplicaSet",
                "name": "vllm-llama-70b-6d9f7c8b5",
                "uid": "0b6f3c1e-8d2a-4f5b-9c7e-1a2b3c4d5e6f"
            }
        ],
        "resourceVersion": "48213391",
        "uid": "5e2d7a90-3c1b-4e8f-a6d4-9b0c1d2e3f40"
    },
    "spec": {
        "containers": [
            {
                "args": [
                    "--model",
                    "meta-llama/Llama-3.1-70B-Instruct",
                    "--tensor-parallel-size",
                    "4",
                    "--swap-space",
                    "64"
                ],
                "image": "vllm/vllm-openai:v0.8.5",
                "name": "vllm",
                "resources": {
                    "limits": {
                        "memory": "96Gi",
                        "nvidia.com/gpu": "4"
                    },
                    "requests": {
                        "memory": "96Gi",
                        "nvidia.com/gpu": "4"
                    }
                }
            }
        ],
        "initContainers": [
            {
                "image": "busybox:1.36",
                "name": "fetch-weights"
            }
        ],
        "nodeName": "gpu-node-07",
        "restartPolicy": "Always"
    },
    "status": {
        "conditions": [
            {
                "lastProbeTime": null,
                "lastTransitionTime": "2025-03-11T14:02:41Z",
                "status": "True",
                "type": "Ready"
            }
        ],
        "containerStatuses": [
            {
                "containerID": "containerd://9f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100",
                "image": "docker.io/vllm/vllm-openai:v0.8.5",
                "imageID": "docker.io/vllm/vllm-openai@sha256:4c9a1f0b7e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7",
                "lastState": {
                    "terminated": {
                        "containerID": "containerd://1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809",
                        "exitCode": 137,
                        "finishedAt": "2025-03-11T14:02:39Z",
                        "reason": "OOMKilled",
                        "startedAt": "2025-03-11T09:14:57Z"
                    }
                },
                "name": "vllm",
                "ready": true,
                "restartCount": 1,
                "started": true,
                "state": {
                    "running": {
                        "startedAt": "2025-03-11T14:02:40Z"
                    }
                }
            }
        ],
        "hostIP": "10.20.3.17",
        "hostIPs": [
            {
                "ip": "10.20.3.17"
            }
        ],
        "initContainerStatuses": [
            {
                "containerID": "containerd://aa11bb22cc33dd44ee55ff6600778899aabbccddeeff00112233445566778899",
                "image": "docker.io/library/busybox:1.36",
                "imageID": "docker.io/library/busybox@sha256:768e5c6f5cb6db0794eec98dc7a967f40631746c32232b78a3105fb946f3ab83",
                "lastState": {},
                "name": "fetch-weights",
                "ready": true,
                "restartCount": 0,
                "started": false,
                "state": {
                    "terminated": {
                        "containerID": "containerd://aa11bb22cc33dd44ee55ff6600778899aabbccddeeff00112233445566778899",
                        "exitCode": 0,
                        "finishedAt": "2025-03-11T09:14:55Z",
                        "reason": "Completed",
                        "startedAt": "2025-03-11T09:12:30Z"
                    }
                }
            }
        ],
        "phase": "Running",
        "podIP": "10.244.7.41",
        "podIPs": [
            {
                "ip": "10.244.7.41"
            }
        ],
        "qosClass": "Guaranteed",
        "startTime": "2025-03-11T09:12:04Z"
    }
}"""

# `kubectl get events -A -o json` on the node around the kill.
EVENTS = r"""{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "v1",
            "count": 1,
            "eventTime": null,
            "firstTimestamp": "2025-03-11T14:02:39Z",
            "involvedObject": {
                "kind": "Node",
                "name": "gpu-node-07",
                "uid": "gpu-node-07"
            },
            "kind": "Event",
            "lastTimestamp": "2025-03-11T14:02:39Z",
            "message": "System OOM encountered, victim process: python3, pid: 3858903",
            "metadata": {
                "creationTimestamp": "2025-03-11T14:02:39Z",
                "name": "gpu-node-07.182b9f1c3d4e5f60",
                "namespace": "default",
                "resourceVersion": "4821328",
                "uid": "c1f8e0a2-5b7d-4d3e-9f1a-2b3c4d5e6f70"
            },
            "reason": "SystemOOM",
            "reportingComponent": "kubelet",
            "reportingInstance": "gpu-node-07",
            "source": {
                "component": "kubelet",
                "host": "gpu-node-07"
            },
            "type": "Warning"
        },
        {
            "apiVersion": "v1",
            "count": 1,
            "eventTime": null,
            "firstTimestamp": "2025-03-11T14:02:39Z",
            "involvedObject": {
                "kind": "Node",
                "name": "gpu-node-07",
                "uid": "gpu-node-07"
            },
            "kind": "Event",
            "lastTimestamp": "2025-03-11T14:02:39Z",
            "message": "Out of memory: Killed process 3858903 (python3) total-vm:412233880kB, anon-rss:100356720kB, file-rss:81232kB, shmem-rss:2048kB, UID:0 pgtables:201588kB oom_score_adj:-997",
            "metadata": {
                "creationTimestamp": "2025-03-11T14:02:39Z",
                "name": "gpu-node-07.182b9f1c41a2b3c4",
                "namespace": "default",
                "resourceVersion": "4821328",
                "uid": "d2a9f1b3-6c8e-4e4f-8a2b-3c4d5e6f7081"
            },
            "reason": "OOMKilling",
            "reportingComponent": "kernel-monitor",
            "reportingInstance": "gpu-node-07",
            "source": {
                "component": "kernel-monitor",
                "host": "gpu-node-07"
            },
            "type": "Warning"
        },
        {
            "apiVersion": "v1",
            "count": 3,
            "eventTime": null,
            "firstTimestamp": "2025-03-11T14:02:40Z",
            "involvedObject": {
                "apiVersion": "v1",
                "fieldPath": "spec.containers{vllm}",
                "kind": "Pod",
                "name": "vllm-llama-70b-6d9f7c8b5-x2kqp",
                "namespace": "inference",
                "resourceVersion": "48213102",
                "uid": "5e2d7a90-3c1b-4e8f-a6d4-9b0c1d2e3f40"
            },
            "kind": "Event",
            "lastTimestamp": "2025-03-11T14:03:10Z",
            "message": "Back-off restarting failed container vllm in pod vllm-llama-70b-6d9f7c8b5-x2kqp_inference(5e2d7a90-3c1b-4e8f-a6d4-9b0c1d2e3f40)",
            "metadata": {
                "creationTimestamp": "2025-03-11T14:02:40Z",
                "name": "vllm-llama-70b-6d9f7c8b5-x2kqp.182b9f1d0e1f2a3b",
                "namespace": "inference",
                "resourceVersion": "4821347",
                "uid": "e3b0a2c4-7d9f-4f50-9b3c-4d5e6f708192"
            },
            "reason": "BackOff",
            "reportingComponent": "kubelet",
            "reportingInstance": "gpu-node-07",
            "source": {
                "component": "kubelet",
                "host": "gpu-node-07"
            },
            "type": "Warning"
        },
        {
            "apiVersion": "v1",
            "count": 1,
            "eventTime": null,
            "firstTimestamp": "2025-03-11T14:02:40Z",
            "involvedObject": {
                "apiVersion": "v1",
                "fieldPath": "spec.containers{vllm}",
                "kind": "Pod",
                "name": "vllm-llama-70b-6d9f7c8b5-x2kqp",
                "namespace": "inference",
                "resourceVersion": "48213102",
                "uid": "5e2d7a90-3c1b-4e8f-a6d4-9b0c1d2e3f40"
            },
            "kind": "Event",
            "lastTimestamp": "2025-03-11T14:02:40Z",
            "message": "Container image \"vllm/vllm-openai:v0.8.5\" already present on machine",
            "metadata": {
                "creationTimestamp": "2025-03-11T14:02:40Z",
                "name": "vllm-llama-70b-6d9f7c8b5-x2kqp.182b9f1d2c3d4e5f",
                "namespace": "inference",
                "resourceVersion": "4821347",
                "uid": "f4c1b3d5-8e0a-4061-8c4d-5e6f708192a3"
            },
            "reason": "Pulled",
            "reportingComponent": "kubelet",
            "reportingInstance": "gpu-node-07",
            "source": {
                "component": "kubelet",
                "host": "gpu-node-07"
            },
            "type": "Normal"
        }
    ],
    "kind": "List",
    "metadata": {
        "resourceVersion": ""
    }
}"""

OTHER_FORMATS = {
    "nvidia_smi_csv": b"pid, process_name, used_gpu_memory [MiB]\n3858903, VLLM::EngineCore, 6265 MiB\n",
    "memory_stats": b'{"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2048, "num_ooms": 0}',
    "alert": b'{"version": "4", "groupKey": "{}:{alertname=\\"X\\"}", "status": "firing", "receiver": "pager",'
             b' "alerts": [{"labels": {"pod": "vllm-0", "namespace": "inference"}}]}',
    "vllm_log": b"INFO 03-11 14:02:31 [api_server.py:1090] vLLM API server version 0.8.5.post1\n",
    "describe": b"Name:         vllm-0\nNamespace:    inference\nLast State:     Terminated\n"
                b"  Reason:       OOMKilled\n  Exit Code:    137\n",
    "prometheus_api": b'{"status":"success","data":{"resultType":"vector","result":[{"metric":'
                      b'{"__name__":"kube_pod_container_status_last_terminated_reason","pod":"vllm-0"},'
                      b'"value":[1741701753.5,"1"]}]}}',
}


def _parse(data: str | bytes, display: str = "k8s/pod.json") -> list:
    raw = data.encode() if isinstance(data, str) else data
    ctx = ParseContext(times=default_reference())
    return list(kubernetes.parse(InputFile(display=display, path=None, data=raw), ctx))


def _kubectl(obj: dict) -> str:
    """kubectl's own JSON layout: 4-space indent, sorted keys."""
    return json.dumps(obj, indent=4, sort_keys=True) + "\n"


def _pod_with_last_state(terminated: dict) -> dict:
    pod = json.loads(POD)
    pod["status"]["containerStatuses"][0]["lastState"] = {"terminated": terminated}
    return pod


def _of(ev: list, kind: Kind) -> list:
    return [e for e in ev if e.kind == kind.value]


# ---------------------------------------------------------------------------------- sniff


@pytest.mark.parametrize("data", [POD, EVENTS])
def test_sniff_claims_kubectl_json(data: str) -> None:
    assert kubernetes.sniff(data.encode(), "x") >= 50


def test_sniff_claims_a_pod_list() -> None:
    listing = {"apiVersion": "v1", "items": [json.loads(POD)], "kind": "List", "metadata": {"resourceVersion": ""}}
    assert kubernetes.sniff(_kubectl(listing).encode(), "x") >= 50


@pytest.mark.parametrize("name", sorted(OTHER_FORMATS))
def test_sniff_rejects_other_formats(name: str) -> None:
    assert kubernetes.sniff(OTHER_FORMATS[name], "x") == 0


@pytest.mark.parametrize("data", [POD, EVENTS])
def test_other_parsers_do_not_claim_kubectl_json(data: str) -> None:
    for mod in (nvidia_smi, memory_stats, alertmanager):
        assert mod.sniff(data.encode(), "x") == 0, mod.NAME


def test_sniff_never_raises_on_random_bytes() -> None:
    rng = random.Random(7)
    for size in (0, 1, 5, 128, 4096):
        for _ in range(20):
            blob = bytes(rng.randrange(256) for _ in range(size))
            assert kubernetes.sniff(blob, "x") == 0
    assert kubernetes.sniff(b"apiVersion: v1\nkind: Pod\n", "x") == 0     # YAML is not read
    assert kubernetes.sniff(b'{"kind": "Pod"', "x") > 0                  # cut JSON: parse reports it


# ---------------------------------------------------------------------------------- pods


def test_oomkilled_last_state() -> None:
    ev = _parse(POD)
    (oom,) = _of(ev, Kind.OOM_KILLED)
    f = oom.fields
    assert f["pod"] == "vllm-llama-70b-6d9f7c8b5-x2kqp"
    assert f["namespace"] == "inference"
    assert f["node"] == "gpu-node-07"
    assert f["container"] == "vllm"
    assert (f["state"], f["which"], f["reason"], f["exit_code"]) == ("terminated", "last", "OOMKilled", 137)
    assert f["signal"] is None
    assert f["sigkill"] is True
    assert f["restart_count"] == 1
    assert f["started_at"] == "2025-03-11T09:14:57Z"
    assert f["finished_at"] == "2025-03-11T14:02:39Z"
    assert oom.time == datetime(2025, 3, 11, 14, 2, 39, tzinfo=timezone.utc)
    assert "OOMKilled" in oom.text and "exit code 137" in oom.text
    # It cites the container status it came from.
    assert '"restartCount": 1' in POD.splitlines()[oom.line - 1]


def test_pod_status_for_every_state() -> None:
    statuses = _of(_parse(POD), Kind.POD_STATUS)
    got = [(e.fields["container"], e.fields["which"], e.fields["state"], e.fields["reason"]) for e in statuses]
    # kubectl sorts keys: containerStatuses is printed before initContainerStatuses.
    assert got == [
        ("vllm", "current", "running", None),
        ("vllm", "last", "terminated", "OOMKilled"),
        ("fetch-weights", "current", "terminated", "Completed"),
    ]
    running, _, init = statuses
    assert running.time == datetime(2025, 3, 11, 14, 2, 40, tzinfo=timezone.utc)
    assert running.fields["sigkill"] is False and running.fields["exit_code"] is None
    assert init.fields["init_container"] is True and init.fields["exit_code"] == 0
    assert init.time == datetime(2025, 3, 11, 9, 14, 55, tzinfo=timezone.utc)
    assert '"restartCount": 0' in POD.splitlines()[init.line - 1]
    assert all(e.time is None or e.time.tzinfo == timezone.utc for e in statuses)


def test_exit_137_without_oomkilled_is_only_a_sigkill() -> None:
    # A liveness-probe kill or `kubectl delete --grace-period=0`: SIGKILL, but no OOM.
    pod = _pod_with_last_state({"exitCode": 137, "reason": "Error", "startedAt": "2025-03-11T09:14:57Z",
                                "finishedAt": "2025-03-11T14:02:39Z"})
    ev = _parse(_kubectl(pod))
    assert _of(ev, Kind.OOM_KILLED) == []
    (last,) = [e for e in _of(ev, Kind.POD_STATUS) if e.fields["which"] == "last"]
    assert last.fields["exit_code"] == 137 and last.fields["sigkill"] is True
    assert last.fields["reason"] == "Error"


def test_gpu_oom_exit_code_1() -> None:
    pod = _pod_with_last_state({"exitCode": 1, "reason": "Error", "startedAt": "2025-03-11T09:14:57Z",
                                "finishedAt": "2025-03-11T14:02:39Z"})
    ev = _parse(_kubectl(pod))
    assert _of(ev, Kind.OOM_KILLED) == []
    (last,) = [e for e in _of(ev, Kind.POD_STATUS) if e.fields["which"] == "last"]
    assert (last.fields["exit_code"], last.fields["sigkill"]) == (1, False)


def test_current_state_oomkilled_and_waiting() -> None:
    pod = json.loads(POD)
    cs = pod["status"]["containerStatuses"][0]
    cs["state"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2025-03-11T14:02:40Z",
                                  "finishedAt": "2025-03-11T14:20:01.123456Z"}}
    cs["lastState"] = {}
    extra = copy.deepcopy(cs)
    extra["name"] = "sidecar"
    extra["state"] = {"waiting": {"message": "back-off 5m0s restarting failed container=sidecar",
                                  "reason": "CrashLoopBackOff"}}
    pod["status"]["containerStatuses"].append(extra)
    ev = _parse(_kubectl(pod))
    (oom,) = _of(ev, Kind.OOM_KILLED)
    assert oom.fields["which"] == "current"
    assert oom.time == datetime(2025, 3, 11, 14, 20, 1, 123456, tzinfo=timezone.utc)
    (waiting,) = [e for e in _of(ev, Kind.POD_STATUS) if e.fields["state"] == "waiting"]
    assert waiting.fields["reason"] == "CrashLoopBackOff" and waiting.time is None


def test_pod_list() -> None:
    other = json.loads(POD)
    other["metadata"]["name"] = "vllm-llama-70b-6d9f7c8b5-q8w2n"
    other["spec"]["nodeName"] = "gpu-node-08"
    other["status"]["containerStatuses"][0]["lastState"] = {}
    listing = {"apiVersion": "v1", "items": [json.loads(POD), other], "kind": "List",
               "metadata": {"resourceVersion": ""}}
    text = _kubectl(listing)
    ev = _parse(text)
    assert [e.fields["pod"] for e in _of(ev, Kind.OOM_KILLED)] == ["vllm-llama-70b-6d9f7c8b5-x2kqp"]
    assert {e.fields["node"] for e in _of(ev, Kind.POD_STATUS)} == {"gpu-node-07", "gpu-node-08"}
    for e in ev:
        assert '"restartCount"' in text.splitlines()[e.line - 1]


def test_signal_9_is_a_sigkill() -> None:
    pod = _pod_with_last_state({"exitCode": 0, "signal": 9, "reason": "Error",
                                "finishedAt": "2025-03-11T14:02:39Z"})
    (last,) = [e for e in _of(_parse(_kubectl(pod)), Kind.POD_STATUS) if e.fields["which"] == "last"]
    assert (last.fields["signal"], last.fields["sigkill"]) == (9, True)


# ---------------------------------------------------------------------------------- events


def test_node_oom_events() -> None:
    ev = _parse(EVENTS, display="k8s/events.json")
    assert [e.kind for e in ev] == [Kind.HOST_OOM_KILL.value] * 2      # BackOff and Pulled are dropped
    system, npd = ev
    assert system.fields["reason"] == "SystemOOM"
    assert system.fields["message"] == "System OOM encountered, victim process: python3, pid: 3858903"
    assert system.fields["object"] == "Node/gpu-node-07"
    assert system.fields["node"] == "gpu-node-07"
    assert system.fields["count"] == 1
    assert system.time == datetime(2025, 3, 11, 14, 2, 39, tzinfo=timezone.utc)
    assert npd.fields["reason"] == "OOMKilling"
    assert npd.fields["component"] == "kernel-monitor"
    assert npd.fields["message"].startswith("Out of memory: Killed process 3858903 (python3)")
    lines = EVENTS.splitlines()
    assert all('"involvedObject"' in lines[e.line - 1] for e in ev)


def test_event_matched_by_kernel_text_and_time_fallbacks() -> None:
    event = {"apiVersion": "v1", "kind": "Event", "count": 4, "reason": "ContainerOOM", "type": "Warning",
             "message": "Memory cgroup out of memory: Killed process 3858903 (python3)",
             "involvedObject": {"kind": "Pod", "name": "vllm-0", "namespace": "inference"},
             "eventTime": "2025-03-11T14:02:39.412345Z", "firstTimestamp": None, "lastTimestamp": None,
             "metadata": {"name": "vllm-0.1", "namespace": "inference"}}
    (e,) = _parse(_kubectl(event))
    assert e.kind == Kind.HOST_OOM_KILL.value
    assert e.fields["object"] == "Pod/inference/vllm-0" and e.fields["count"] == 4
    assert e.time == datetime(2025, 3, 11, 14, 2, 39, 412345, tzinfo=timezone.utc)


def test_last_timestamp_wins_over_first() -> None:
    doc = json.loads(EVENTS)
    doc["items"][0]["firstTimestamp"] = "2025-03-11T13:00:00Z"
    doc["items"][0]["count"] = 5
    e = _parse(_kubectl(doc))[0]
    assert e.time == datetime(2025, 3, 11, 14, 2, 39, tzinfo=timezone.utc) and e.fields["count"] == 5


def test_events_k8s_io_v1_shape() -> None:
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "reason": "OOMKilling", "type": "Warning",
             "note": "Out of memory: Killed process 3858903 (python3) total-vm:412233880kB",
             "regarding": {"kind": "Node", "name": "gpu-node-07"}, "reportingController": "kernel-monitor",
             "eventTime": None, "deprecatedCount": 2, "deprecatedLastTimestamp": "2025-03-11T14:02:39Z",
             "metadata": {"name": "gpu-node-07.1", "namespace": "default"}}
    listing = {"apiVersion": "v1", "kind": "List", "items": [event], "metadata": {}}
    (e,) = _parse(_kubectl(listing))
    assert (e.fields["object"], e.fields["count"], e.fields["component"]) == ("Node/gpu-node-07", 2, "kernel-monitor")
    assert e.time == datetime(2025, 3, 11, 14, 2, 39, tzinfo=timezone.utc)
    assert e.line is not None


# ---------------------------------------------------------------------------------- bad input


def test_truncated_json_is_bad_input() -> None:
    with pytest.raises(BadInput) as err:
        _parse(POD[: len(POD) // 2])
    assert str(err.value).startswith("k8s/pod.json: ")


def test_json_without_pods_or_events_is_bad_input() -> None:
    with pytest.raises(BadInput):
        _parse('{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm"}}')

"""A server in Kubernetes: `kubectl get pod -o json`, its events, and `kubectl logs` per container
(with `--previous` for a container that restarted: the crashed run's log is the evidence).

Pod JSON carries the containers' environment, secrets included (`env: [{name: HF_TOKEN, value:
...}]`, and again inside the last-applied-configuration annotation): values whose name says
secret are masked, then every string as in any other output.
"""
from __future__ import annotations

import json
import re
import tempfile
from typing import Any

from ...redact import is_secret_key, mask, redact
from ..command import run as run_command
from .log_source import write_masked
from ..source import SourceRun

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")     # namespace and pod names (RFC 1123)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def parse_target(text: str) -> tuple[str, str] | None:
    """NS/POD -> (namespace, pod); None when it is not that."""
    ns, slash, pod = text.partition("/")
    if not slash or not NAME_RE.match(ns) or not NAME_RE.match(pod):
        return None
    return ns, pod


def _kubectl(ns: str, *args: str, timeout_s: float) -> list[str]:
    return ["kubectl", "--namespace", ns, *args, f"--request-timeout={max(1, int(timeout_s))}s"]


def pod(run: SourceRun, ns: str, name: str) -> dict | None:
    done = run_command(_kubectl(ns, "get", "pod", name, "-o", "json", timeout_s=run.left()), run.left())
    if not done.ok:
        run.fail(str(done.problem))
        return None
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        run.fail("kubectl's answer is not JSON")
        return None
    masked = redact(_mask_env(doc))
    run.write("k8s/pod.json", (json.dumps(masked, indent=4) + "\n").encode())
    phase = (doc.get("status") or {}).get("phase") if isinstance(doc, dict) else None
    run.ok(f"phase {phase}, restarts {sum(restarts(doc).values())}")
    return doc


def events(run: SourceRun, ns: str, name: str) -> None:
    done = run_command(_kubectl(ns, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json",
                                timeout_s=run.left()), run.left())
    if not done.ok:
        run.fail(str(done.problem))
        return
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        run.fail("kubectl's answer is not JSON")
        return
    items = doc.get("items") if isinstance(doc, dict) else None
    if not items:
        run.ok("no events")
        return
    run.write("k8s/events.json", (json.dumps(redact(doc), indent=4) + "\n").encode())
    run.ok(f"{len(items)} events")


def logs(run: SourceRun, ns: str, name: str, pod_doc: dict | None, max_bytes: int) -> None:
    """Each container's log (and the previous run's, after a restart) into logs/."""
    wanted: list[tuple[str | None, bool]] = [(None, False)]          # the default container, when the pod is unknown
    if pod_doc is not None:
        counts = restarts(pod_doc)
        wanted = [(c, prev) for c in containers(pod_doc) for prev in ((False, True) if counts.get(c) else (False,))]
    kept, problems = [], []
    for container, previous in wanted:
        # --tail, not --limit-bytes (which keeps the start): about max_bytes of the end, cut exactly below
        args = ["logs", name, f"--tail={max(1000, max_bytes // 64)}"] + (["-c", container] if container else []) + \
               (["--previous"] if previous else [])
        rel = f"logs/{name}{'_' + container if container else ''}{'.previous' if previous else ''}.log"
        with tempfile.TemporaryFile() as spool:
            done = run_command(_kubectl(ns, *args, timeout_s=run.left()), run.left(), stdout=spool)
            if not done.ok:
                problems.append(f"{container or name}{' --previous' if previous else ''}: {done.problem}")
                continue
            spool.flush()
            if write_masked(run, spool.fileno(), rel, max_bytes, "kubectl " + " ".join(args)) is not None:
                kept.append(rel)
    if kept:
        run.ok(f"{len(kept)} log{'s' if len(kept) != 1 else ''}" + (f"; {'; '.join(problems)}" if problems else ""))
    elif problems:
        run.fail("; ".join(problems))
    else:
        run.ok("empty: nothing kept")


def containers(doc: dict) -> list[str]:
    spec = doc.get("spec") if isinstance(doc, dict) else None
    items = spec.get("containers") if isinstance(spec, dict) else None
    return [str(c["name"]) for c in items or [] if isinstance(c, dict) and c.get("name")]


def restarts(doc: Any) -> dict[str, int]:
    status = doc.get("status") if isinstance(doc, dict) else None
    out: dict[str, int] = {}
    for cs in (status or {}).get("containerStatuses") or []:
        if isinstance(cs, dict) and cs.get("name"):
            count = cs.get("restartCount")
            out[str(cs["name"])] = count if isinstance(count, int) else 0
    return out


def _mask_env(value: Any) -> Any:
    """A copy with every `{name: SECRET_NAME, value: ...}` value masked, the last-applied
    annotation (the same spec again, as a JSON string) masked the same way."""
    if isinstance(value, dict):
        out = {k: _mask_env(v) for k, v in value.items()}
        name, val = out.get("name"), out.get("value")
        if isinstance(name, str) and isinstance(val, str) and val and is_secret_key(name):
            out["value"] = mask(val)
        if isinstance(out.get(LAST_APPLIED), str):
            try:
                out[LAST_APPLIED] = json.dumps(_mask_env(json.loads(out[LAST_APPLIED])))
            except ValueError:
                pass
        return out
    if isinstance(value, list):
        return [_mask_env(v) for v in value]
    return value

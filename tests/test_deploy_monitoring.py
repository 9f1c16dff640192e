"""The shipped monitoring in deploy/: Prometheus alert rules and a Grafana dashboard.

Checked with the real tools: promtool validates the rules and runs their unit tests (every alert
made to fire and kept quiet), and validates every dashboard expression written as a recording
rule; a real Prometheus server loads both, scrapes a `triage sim serve` instance and evaluates
them. Every metric name is traced to what vLLM, dcgm-exporter or `triage watch --exporter` really
exposes, and every number an alert compares against to triage/thresholds.py.

promtool and prometheus come from Debian's `prometheus` package (.ci/run installs it); where
they cannot be had, the tests that need them skip and say so.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import click
import pytest
import yaml

from triage.cli import main as cli
from triage.evidence.prometheus import CONCEPTS
from triage.thresholds import TABLE

from .simkit import complete, kill_group, wait_until, words
from .test_sim import start_sim  # noqa: F401  (the fixture: simulator processes killed by group)

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "deploy" / "prometheus" / "triage-alerts.yaml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "triage-alerts.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "triage-dashboard.json"
EXPORTER_METRICS = ROOT / "triage" / "data" / "exporter_metrics.yaml"
# The names real vLLM and dcgm-exporter releases expose, each with where the formats reference
# records it (an excerpt kept in the repository: a test reads only what the repository holds).
FORMATS = ROOT / "tests" / "reference" / "metric_names.md"

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: it comes with Debian's "
                                    "`prometheus` package (`apt-get install prometheus`; .ci/run installs it)")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus server binary not found: "
                                      "Debian's `prometheus` package (.ci/run installs it)")
TOOL_TIMEOUT_S = 60
START_S = 20.0          # a Prometheus server answering /-/ready
EVALUATED_S = 30.0      # every rule evaluated, the expected ones pending


# --- PromQL: metric names, numbers, durations -------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_NAME_MATCHER = re.compile(r"__name__\s*(=~|!=|!~|=)\s*\x00(\d+)\x00")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[([^\]]*)\]")
_OFFSET = re.compile(r"\boffset\s+(-?[0-9][0-9smhdwy]*)")
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][A-Za-z0-9_:]*)(?![\w:])(\s*\()?")
_NUMBER = re.compile(r"(?<![\w:.])(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?![\w.])")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan"}
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


@dataclass
class Parsed:
    names: set[str] = field(default_factory=set)
    numbers: set[float] = field(default_factory=set)
    durations: set[float] = field(default_factory=set)      # seconds: range windows and offsets


def parse_promql(expr: str) -> Parsed:
    """The metric names, the number literals and the durations of a PromQL expression.

    String literals go first (a regular expression may hold anything); a `__name__="..."`
    matcher names its metric (a name pattern `__name__=~` cannot be checked and is refused). Then label matchers,
    the label lists of by/without/on/ignoring/group_left/group_right, range and subquery windows
    and offsets are taken out, and of the words left those before a parenthesis are functions
    or aggregations and a few are keywords: the rest are metric names."""
    strings: list[str] = []

    def hide(m: re.Match) -> str:
        strings.append(m.group(0)[1:-1])
        return f"\x00{len(strings) - 1}\x00"

    text = _STRING.sub(hide, expr)
    out = Parsed()
    for block in _MATCHERS.findall(text):
        for op, index in _NAME_MATCHER.findall(block):
            assert op != "=~", f"a metric-name pattern cannot be checked: __name__=~{strings[int(index)]!r}"
            if op == "=":                       # (a negative one only filters the names given)
                out.names.add(strings[int(index)])
    text = _MATCHERS.sub(" ", text)
    while _GROUPING.search(text):
        text = _GROUPING.sub(" ", text)
    for window in _RANGE.findall(text):
        out.durations.update(duration_s(part) for part in window.split(":") if part.strip())
    text = _RANGE.sub(" ", text)
    out.durations.update(duration_s(d) for d in _OFFSET.findall(text))
    text = _OFFSET.sub(" ", text)
    text = re.sub(r"\x00\d+\x00", " ", text)
    for name, call in _IDENT.findall(text):
        if not call and name.lower() not in _KEYWORDS:
            out.names.add(name)
    out.numbers = {float(n) for n in _NUMBER.findall(text)}
    return out


def duration_s(text: str) -> float:
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text.strip())
    assert parts and "".join(n + u for n, u in parts) == text.strip(), f"not a duration: {text!r}"
    return sum(int(n) * _UNITS[u] for n, u in parts)


def test_promql_parser_finds_names_numbers_and_durations():
    p = parse_promql('sum by (job, le) (rate(foo_total{a="b{2}", c=~"x|y", __name__!~"z"}[5m] offset 1h)) '
                     '/ on (job) group_left (instance) bar:ratio > bool 0.5 and baz unless 1e3 * Inf')
    assert p.names == {"foo_total", "bar:ratio", "baz"}
    assert p.numbers == {0.5, 1000.0}
    assert p.durations == {300, 3600}
    p = parse_promql('{__name__="vllm:num_requests_running", instance="a:1"} '
                     '+ ignoring(x) count_values("value", up) '
                     '- label_replace(max without (gpu) (qux[1h:5m]), "dst", "$1", "src", "(.*)")')
    assert p.names == {"vllm:num_requests_running", "up", "qux"}
    assert p.durations == {3600, 300} and not p.numbers
    p = parse_promql("sum(rate(x[1m])) by (le) * 3600 / (a + b) >= -1")
    assert p.names == {"x", "a", "b"} and p.numbers == {3600, 1}
    with pytest.raises(AssertionError, match="metric-name pattern"):
        parse_promql('{__name__=~"vllm:.*"}')


# --- what is really exposed -------------------------------------------------------------------------

# vLLM names the evidence parser's map does not hold, each with where formats.md records it.
VLLM_FROM_FORMATS = {
    "vllm:prompt_tokens_total": "formats.md 1.2 (V0 counter) and 1.3 (V1 counter)",
    "vllm:generation_tokens_total": "formats.md 1.2 (V0 counter) and 1.3 (V1 counter)",
}
# dcgm-exporter's framebuffer gauges (MiB) and its 1.x names: formats.md 5 (default-counters.csv).
DCGM_NAMES = {n for n in CONCEPTS if n.startswith(("DCGM_", "dcgm_"))}
# The exporter's readings of vLLM's own /metrics (triage/data/exporter_metrics.yaml says which).
EXPORTER_COPIES_OF_VLLM = {"triage_kv_cache_usage_ratio", "triage_requests_running", "triage_requests_waiting",
                           "triage_preemptions_per_second", "triage_prefix_cache_hit_ratio",
                           "triage_request_success_per_second"}
# Written by Prometheus itself for the alerting rules of this directory (the dashboard's
# annotation query reads it); the live test below sees it appear.
PROMETHEUS_OWN = {"ALERTS"}


def exporter_names() -> set[str]:
    return set(yaml.safe_load(EXPORTER_METRICS.read_text(encoding="utf-8"))["metrics"])


def known_names() -> set[str]:
    vllm = {n for n in CONCEPTS if n.startswith("vllm:")} | set(VLLM_FROM_FORMATS)
    return vllm | DCGM_NAMES | exporter_names() | PROMETHEUS_OWN


def test_every_vllm_and_dcgm_name_allowed_is_in_the_formats_reference():
    listed = set(re.findall(r"^\| `([^`]+)` \|", FORMATS.read_text(encoding="utf-8"), re.MULTILINE))
    allowed = {n for n in CONCEPTS if n.startswith("vllm:")} | set(VLLM_FROM_FORMATS) | DCGM_NAMES
    missing = sorted(n for n in allowed if n not in listed)
    assert not missing, f"not in {FORMATS.relative_to(ROOT)}: {missing}"


# --- the alert rules ----------------------------------------------------------------------------------

def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


RULES = {rule["alert"]: rule for rule in alert_rules()}
OOM_CLASSES = {"startup", "burst", "chronic", "prefix_cache", "unknown"}


@dataclass(frozen=True)
class Expect:
    """What an alert's expression may compare against: thresholds.py entries (times a unit
    scale) and constants that are not thresholds, each with its reason; its windows in seconds."""
    table: dict[str, float]
    local: dict[float, str]
    durations: frozenset[float]
    for_s: float
    text: tuple[str, ...] = ()     # what the summary says of the threshold
    value: str = "$value"          # how the description gives the value


def _pct(key: str) -> str:
    return f"{TABLE[key].value * 100:g}%"


# The slope's window and "served that long ago" are leak_min_span_s; the request rate compares the
# last half of it with the half before.
_LEAK_WINDOWS = frozenset({TABLE["leak_min_span_s"].value, TABLE["leak_min_span_s"].value / 2})


_FLAT_LOAD = "flat load: the request rate of the last half of the window at most 1.2x the half before"
EXPECTED: dict[str, Expect] = {
    "TriageKvCacheHigh": Expect({"kv_high": 1}, {}, frozenset(), 300, (_pct("kv_high"),)),
    "TriageKvCacheCritical": Expect({"kv_critical": 1}, {}, frozenset(), 120, (_pct("kv_critical"),)),
    "TriageRequestsQueueing": Expect({"waiting_high": 1}, {3: "the flowchart's waiting > 3x running"}, frozenset(),
                                     300, ("3 waiting per running",)),
    "TriageNoSuccessfulRequests": Expect({}, {0: "no success; requests present"}, frozenset({300}), 0),
    "TriagePrefixCacheLowHitRate": Expect({"prefix_hit_low": 1}, {0: "V0's gauge is -1 with caching off"},
                                          frozenset({900}), 900, (_pct("prefix_hit_low"),)),
    "TriageUtilisationNoHeadroom": Expect({}, {}, frozenset(), 60,                # a label pattern: see below
                                          value="{{ $labels.gpu_memory_utilization }}"),
    "TriageNvmlEngineDiscrepancy": Expect({"discrepancy": 100}, {}, frozenset(), 120),   # percentage points
    "TriageGpuMemoryLeak": Expect({"leak_min_rise": 1, "leak_min_span_s": 1},
                                  {1.2: _FLAT_LOAD, 1: "triage_source_up is 1"}, _LEAK_WINDOWS, 600),
    "TriageGpuMemoryLeakDcgm": Expect({"leak_min_rise": 1, "leak_min_span_s": 1},
                                      {1.2: _FLAT_LOAD, 0: "no counter reset (restart) in the window"},
                                      _LEAK_WINDOWS, 600),
    "TriageAllocatorFragmentation": Expect({"inactive_split_share": 1}, {}, frozenset(), 600),
    "TriageOomRisk": Expect({}, {1: "triage_oom_risk is 1"}, frozenset(), 120, value="{{ $labels.class }}"),
}


def test_every_alert_has_its_expectations():
    assert sorted(RULES) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_alert_thresholds_are_the_tables(name):
    rule, want = RULES[name], EXPECTED[name]
    parsed = parse_promql(rule["expr"])
    table = {round(TABLE[key].value * scale, 9) for key, scale in want.table.items()}
    assert {round(n, 9) for n in parsed.numbers} == table | set(want.local), (
        f"{name}: the expression compares against {sorted(parsed.numbers)}; thresholds.py gives "
        f"{ {k: TABLE[k].value for k in want.table} } and the rule's own constants are {want.local}")
    assert parsed.durations == want.durations
    assert duration_s(rule.get("for", "0s")) == want.for_s
    for text in want.text:
        assert text in rule["annotations"]["summary"], f"{name}: the summary does not say {text!r}"


def test_the_no_headroom_pattern_matches_exactly_the_targets_at_or_above_the_threshold():
    expr = RULES["TriageUtilisationNoHeadroom"]["expr"]
    pattern = re.fullmatch(r'vllm:cache_config_info\{gpu_memory_utilization=~"([^"]+)"\}', expr).group(1)
    limit = TABLE["util_no_headroom"].value
    # str() of the float vLLM holds, as prometheus-client renders the label; "1" from a YAML config
    values = [str(round(i / 1000, 3)) for i in range(500, 1001)] + ["1", "0.9499", "0.95001", "0.999999"]
    wrong = [v for v in values if bool(re.fullmatch(pattern, v)) != (float(v) >= limit)]
    assert not wrong, f"the pattern misjudges {wrong}"
    assert f"under {100 - limit * 100:g}%" in RULES["TriageUtilisationNoHeadroom"]["annotations"]["description"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_alert_labels_and_annotations(name):
    rule = RULES[name]
    labels, notes = rule["labels"], rule["annotations"]
    assert labels["severity"] in {"info", "warning", "critical"}
    assert labels["oom_class"] in OOM_CLASSES or labels["oom_class"] == "{{ $labels.class }}"
    assert set(notes) == {"summary", "description", "runbook"}
    assert EXPECTED[name].value in notes["description"], f"{name}: the description does not give the value"
    assert "$labels." in notes["summary"], f"{name}: the summary does not say where"
    assert names_of(parse_promql(rule["expr"])) <= known_names()


def names_of(parsed: Parsed) -> set[str]:
    unknown = parsed.names - known_names()
    assert not unknown, f"not a metric vLLM, dcgm-exporter or triage watch exposes: {sorted(unknown)}"
    return parsed.names


# The options of commands the runbooks name that this build may not have yet, as the design
# gives them; a command the CLI has is checked against its real options.
PLANNED_OPTIONS = {
    "collect": {"--vllm-url", "--log", "--kubectl", "--pid", "-o", "--scrapes", "--every", "--tar"},
    "watch": {"--vllm-url", "--interval", "--incident", "--exporter", "--once", "--json"},
}


def cli_options(command: str) -> set[str]:
    cmd = cli.get_command(click.Context(cli), command)
    if cmd is None:
        assert command in PLANNED_OPTIONS, f"triage has no command {command!r}"
        return PLANNED_OPTIONS[command]
    return {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("-")}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_runbook_is_a_triage_command_line_with_real_options(name):
    runbook = RULES[name]["annotations"]["runbook"]
    line = re.sub(r"\{\{-?\s*\$\w+\s*:=[^}]*\}\}", "", runbook)      # an assignment prints nothing
    line = re.sub(r"\{\{[^}]*\}\}", "X", line)
    for step in line.split("&&"):
        argv = shlex.split(step)
        assert argv[0] == "triage", f"{name}: {step!r} is not a triage command"
        options = {a.split("=", 1)[0] for a in argv[2:] if a.startswith("-")}
        unknown = options - cli_options(argv[1])
        assert not unknown, f"{name}: triage {argv[1]} has no {sorted(unknown)}"


@needs_promtool
def test_promtool_checks_the_rules():
    out = run_tool(PROMTOOL, "check", "rules", "--lint=all", "--lint-fatal", str(ALERTS))
    assert f"SUCCESS: {len(RULES)} rules found" in out


@needs_promtool
def test_promtool_unit_tests_pass():
    out = run_tool(PROMTOOL, "test", "rules", str(ALERT_TESTS))
    assert "SUCCESS" in out


def test_every_alert_is_tested_firing_and_quiet():
    doc = yaml.safe_load(ALERT_TESTS.read_text(encoding="utf-8"))
    assert doc["rule_files"] == [ALERTS.name]
    fired, quiet = set(), set()
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert fired == set(RULES), f"never made to fire: {sorted(set(RULES) - fired)}"
    assert quiet == set(RULES), f"never checked quiet: {sorted(set(RULES) - quiet)}"


def run_tool(*argv: str | None) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{out}"
    return out


# --- the dashboard ------------------------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    flat = []
    for panel in doc["panels"]:
        flat.append(panel)
        flat.extend(panel.get("panels", []))      # a collapsed row holds its panels
    return flat


_GRAFANA_DURATIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_VARIABLE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")


def promql_of(expr: str) -> str:
    """A dashboard expression as Prometheus gets it: Grafana's interval variables a duration, a
    dashboard variable (only ever inside a regex matcher) matching everything."""
    for var, value in _GRAFANA_DURATIONS.items():
        expr = expr.replace(var, value)
    return _VARIABLE.sub(".*", expr)


def dashboard_queries() -> dict[str, str]:
    """Every PromQL the dashboard sends: panel targets, variable queries, annotation queries;
    keyed by a recording-rule name that says where it comes from."""
    doc, out = dashboard(), {}
    for panel in panels(doc):
        for target in panel.get("targets", []):
            out[f"triage_dashboard:panel{panel['id']}_{target['refId']}"] = promql_of(target["expr"])
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
            assert m, f"variable {var['name']}: not label_values(SELECTOR, LABEL)"
            assert var["query"]["query"] == var["definition"]
            out[f"triage_dashboard:var_{var['name']}"] = promql_of(m.group(1))
    for i, note in enumerate(doc["annotations"]["list"]):
        if "expr" in note:
            out[f"triage_dashboard:annotation{i}"] = promql_of(note["expr"])
    return out


def dashboard_rules_file(directory: Path) -> Path:
    path = directory / "dashboard-rules.yaml"
    rules = [{"record": name, "expr": expr} for name, expr in dashboard_queries().items()]
    path.write_text(yaml.safe_dump({"groups": [{"name": "triage-dashboard", "rules": rules}]}), encoding="utf-8")
    return path


def test_dashboard_is_an_importable_current_schema_dashboard():
    doc = dashboard()
    assert doc["schemaVersion"] >= 39 and doc["uid"] and doc["title"]
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert {"instance", "server"} <= set(variables)
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels(doc):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel.get("description"), f"{panel['title']}: no description"
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["refId"] and target["expr"]
            left = re.sub(r'"[^"]*"', "", target["expr"])
            assert "$" not in left.replace("$__rate_interval", ""), \
                f"{panel['title']}: a variable outside a matcher or range: {target['expr']}"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


# Panel title -> the thresholds.py entries its threshold steps show (times the panel's unit
# scale), or a constant of the alert rules that is not in the table.
PANEL_THRESHOLDS: dict[str, list[tuple[str | float, float]]] = {
    "KV-cache usage": [("kv_high", 1), ("kv_critical", 1)],
    "Waiting requests per running request": [(3, 1)],                       # TriageRequestsQueueing
    "Prefix-cache hit rate (caching on)": [("prefix_hit_low", 1)],
    "Framebuffer rise per hour (leak trend)": [("leak_min_rise", 1)],
    "NVML-vs-engine discrepancy": [("discrepancy", 100)],
    "GPU memory rise per hour (leak trend)": [("leak_min_rise", 1)],
    "Allocator fragmentation": [("inactive_split_share", 1)],
    "OOM risk by class": [(1, 1)],
    "Sources read by triage watch": [(1, 1)],
}


def test_dashboard_thresholds_are_the_alerts():
    shown = {}
    for panel in panels(dashboard()):
        if panel["type"] in ("row", "table"):
            continue
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        values = [s["value"] for s in steps if s["value"] is not None]
        if values:
            shown[panel["title"]] = values
            assert panel["type"] != "timeseries" or \
                panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off", panel["title"]
    want = {title: [round(TABLE[k].value * scale, 9) if isinstance(k, str) else k for k, scale in keys]
            for title, keys in PANEL_THRESHOLDS.items()}
    assert shown == want


def test_dashboard_marks_the_no_headroom_targets_as_the_alert_does():
    alert = re.search(r'=~"([^"]+)"', RULES["TriageUtilisationNoHeadroom"]["expr"]).group(1)
    [table] = [p for p in panels(dashboard()) if p["type"] == "table"]
    [override] = [o for o in table["fieldConfig"]["overrides"] if o["matcher"]["options"] == "gpu_memory_utilization"]
    [mapping] = [p["value"][0] for p in override["properties"] if p["id"] == "mappings"]
    assert mapping["options"]["pattern"] == f"^({alert})$"      # Grafana's patterns are not anchored


def test_dashboard_uses_only_real_metric_names():
    used: set[str] = set()
    for where, expr in dashboard_queries().items():
        try:
            used |= names_of(parse_promql(expr))
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
    for name in RULES:
        used |= parse_promql(RULES[name]["expr"]).names
    # Everything the rules and the dashboard name is real; of the exporter's gauges only its
    # copies of vLLM's own are left out (the panels read vLLM's: the same numbers, V0 and V1).
    assert used <= known_names()
    unused = exporter_names() - used
    assert unused <= EXPORTER_COPIES_OF_VLLM, f"exporter gauges on no panel and in no rule: {sorted(unused)}"


@needs_promtool
def test_promtool_checks_every_dashboard_expression(tmp_path):
    path = dashboard_rules_file(tmp_path)
    out = run_tool(PROMTOOL, "check", "rules", str(path))
    assert f"SUCCESS: {len(dashboard_queries())} rules found" in out


# --- a real Prometheus server ------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[list[str], list[Path]], str]]:
    """start(targets, rule_files) -> base URL of a Prometheus server on loopback that scrapes
    `targets` and evaluates `rule_files` every second; the process group is killed afterwards."""
    procs: list[subprocess.Popen] = []

    def start(targets: list[str], rule_files: list[Path]) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": targets}]}],
        }), encoding="utf-8")
        log = tmp_path / "prometheus.log"
        for _ in range(3):                       # a port taken between the probe and the bind: again
            port = free_port()
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
            procs.append(proc)
            url = f"http://127.0.0.1:{port}"
            ready = wait_until(lambda: answers(url + "/-/ready") or proc.poll() is not None, START_S)
            if ready and proc.poll() is None:
                return url
            stop(proc)
        pytest.fail(f"prometheus did not start:\n{log.read_text(errors='replace')[-3000:]}")

    yield start
    for proc in procs:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    kill_group(proc.pid)            # the server runs in a session of its own
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


# The V1 (0.11) names of the rules that `triage sim serve` renders, as a real V1 server does.
SIM_SERVES = {"vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
              "vllm:request_success_total", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
              "vllm:cache_config_info", "vllm:num_preemptions_total", "vllm:prompt_tokens_total",
              "vllm:generation_tokens_total"}


@needs_prometheus
def test_prometheus_loads_and_evaluates_the_rules_on_a_simulated_vllm(start_sim, prometheus, tmp_path):  # noqa: F811
    # 0.95 of the card and prefix caching on: what a real V1 server renders for both labels
    sim = start_sim("--gpu-memory-utilization", "0.95", "--enable-prefix-caching")
    url = prometheus([sim.url.split("//", 1)[1]], [ALERTS, dashboard_rules_file(tmp_path)])

    def query(promql: str) -> list[dict[str, Any]]:
        doc = http_json(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    assert wait_until(lambda: bool(query('up{job="vllm"} == 1')), START_S), "the simulator was never scraped"
    # Prompts that share no prefix: lookups and no hits, the low hit rate of a cache nobody reuses.
    for i in range(3):
        assert complete(sim.url, words(64, f"p{i}"), max_tokens=2) == 200

    def rules() -> dict[str, dict[str, Any]]:
        groups = http_json(f"{url}/api/v1/rules")["data"]["groups"]
        return {r["name"]: r for g in groups for r in g["rules"]}

    expected_pending = {"TriageUtilisationNoHeadroom", "TriagePrefixCacheLowHitRate"}

    def settled() -> bool:
        now = rules()
        return all(r["health"] == "ok" and not r["lastEvaluation"].startswith("0001") for r in now.values()) \
            and all(now[name]["state"] in ("pending", "firing") for name in expected_pending)

    wait_until(settled, EVALUATED_S)
    loaded = rules()
    assert set(RULES) | set(dashboard_queries()) == set(loaded)
    unhealthy = {n: (r["health"], r.get("lastError")) for n, r in loaded.items() if r["health"] != "ok"}
    assert not unhealthy
    states = {name: loaded[name]["state"] for name in RULES}
    assert {n for n, s in states.items() if s != "inactive"} == expected_pending, states
    assert {a["metric"]["alertname"] for a in query('ALERTS{alertname=~"Triage.+"}')} == expected_pending

    served = set(http_json(f"{url}/api/v1/label/__name__/values")["data"])
    assert SIM_SERVES <= served
    used = {n for r in RULES.values() for n in parse_promql(r["expr"]).names}
    used |= {n for e in dashboard_queries().values() for n in parse_promql(e).names}
    assert SIM_SERVES <= used                     # every V1 name the simulator serves is read

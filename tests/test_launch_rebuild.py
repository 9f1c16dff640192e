"""The new command is the whole launch: every argument the evidence holds is in it, or listed as
dropped with its reason — never silently lost (a relaunch without --served-model-name answers 404,
one without --api-key serves unauthenticated)."""
from __future__ import annotations

import json
import shlex

import pytest
import yaml

from triage.api import classify_paths
from triage.cli import main
from triage.evidence.kinds import Kind
from triage.launch import PLACEHOLDER, engine_flags, from_config, is_default, rebuild
from triage.model import Evidence

from tests.conftest import CORPUS, SAMPLES, sample

SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if (p / "expected.yaml").exists())


def _launch_record(evidence, source: str) -> Evidence:
    where = source.split(" (", 1)[0]
    return next(e for e in evidence.of(Kind.LAUNCH_CONFIG) if e.where == where)


def _flags_in(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0][2:].replace("-", "_") for a in argv if a.startswith("--")}


def _check_nothing_lost(verdict, evidence) -> int:
    """Each argument of the record the command was rebuilt from: in argv (its flag or --no- form),
    the model, internal bookkeeping, at its default in a full dump, dropped with a reason, or a
    secret listed under `needs`. Returns how many arguments were checked."""
    launch = verdict.facts["launch"]
    rec = _launch_record(evidence, launch["source"])
    argv = verdict.facts["argv"]
    if rec.fields.get("argv"):
        assert argv == rec.fields["argv"]
        return len(argv)
    engine = verdict.facts.get("engine_name") or verdict.facts["engine"]
    table = engine_flags(engine)
    flags = _flags_in(argv)
    dropped = {d["arg"]: d["why"] for d in launch.get("dropped", [])}
    needs = {n["arg"] for n in launch.get("needs", [])}
    dump = rec.fields.get("origin") != "non-default args"
    defaults = table.defaults_for(verdict.facts.get("engine_version"))
    checked = 0
    args = dict(rec.fields["args"])
    if rec.fields.get("origin") == "engine config":
        args = from_config(args, table)      # its names, read the way the rebuild reads them
    for name, value in args.items():
        if name in table.internal or name in ("model", "model_tag", "model_path", "model_id"):
            assert str(value) in argv or name in table.internal or value in (None, "")
            continue
        if dump and is_default(name, value, defaults):
            continue
        checked += 1
        if name in dropped:
            assert dropped[name], name          # a reason, never an empty string
        elif name in needs:
            assert PLACEHOLDER.format(name=name) in argv
        else:
            assert name in flags or f"no_{name}" in flags, (name, value, argv)
    return checked


@pytest.mark.parametrize("bundle", SAMPLE_DIRS, ids=[d.name for d in SAMPLE_DIRS])
def test_every_sample_launch_argument_is_kept_or_dropped_with_a_reason(bundle):
    verdict, evidence = classify_paths([str(bundle)])
    if "launch" not in verdict.facts:
        assert not evidence.of(Kind.LAUNCH_CONFIG), "launch records but no rebuilt launch"
        return
    assert _check_nothing_lost(verdict, evidence) > 0


def _corpus_with_launch():
    for case in sorted(CORPUS.glob("*.yaml")):
        data = yaml.safe_load(case.read_text())
        if any(m in data["log"] for m in ("non-default args", "Namespace(", "vllm serve", "ServerArgs(",
                                          "with config:", "Args {", "api_server")):
            yield case


@pytest.mark.parametrize("case", list(_corpus_with_launch()), ids=lambda p: p.stem)
def test_every_corpus_launch_argument_is_kept_or_dropped_with_a_reason(case, tmp_path):
    data = yaml.safe_load(case.read_text())
    (tmp_path / "server.log").write_text(data["log"])
    verdict, evidence = classify_paths([str(tmp_path)])
    if "launch" in verdict.facts:
        _check_nothing_lost(verdict, evidence)
    if verdict.command:
        # The printed command parses, and changes nothing but the recommended settings.
        words = shlex.split(verdict.command)
        assert words[0] in ("vllm", "python", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                            "text-generation-launcher") or "=" in words[0]


def test_served_model_name_survives_the_startup_fix(runner):
    out = json.loads(runner.invoke(main, ["classify", str(sample("startup-kv-blowout-v1")), "--json"]).stdout)
    argv = shlex.split(out["command"])
    assert argv == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "8000",
                    "--max-model-len", "29216", "--served-model-name", "llama-3.1-8b-instruct"]
    assert out["facts"]["launch"]["source"] == "logs/vllm.log:3 (non-default args)"


def test_v0_namespace_keeps_what_the_operator_set_and_nothing_else(runner):
    out = json.loads(runner.invoke(main, ["classify", str(sample("prefix-cache-oom-b")), "--json"]).stdout)
    argv = shlex.split(out["command"])
    # The api_server module, as a Namespace without the serve subcommand was started.
    assert argv[:5] == ["python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                        "meta-llama/Meta-Llama-3.1-70B-Instruct"]
    for kept in (["--uvicorn-log-level", "warning"], ["--served-model-name", "llama-3.1-70b-instruct"],
                 ["--tensor-parallel-size", "8"]):
        i = argv.index(kept[0])
        assert argv[i:i + 2] == kept
    assert "--disable-log-requests" in argv
    # Defaults stay off the line: port 8000, block size 16, the tokenizer pool...
    assert not {"--port", "--block-size", "--tokenizer-pool-type", "--swap-space", "--seed"} & set(argv)
    # An upgrade is not something a relaunch does.
    assert "engine_version" not in out["command"]


def test_namespace_of_vllm_serve_uses_its_version_defaults(runner):
    out = json.loads(runner.invoke(main, ["classify", str(sample("startup-sampler-warmup")), "--json"]).stdout)
    argv = shlex.split(out["command"])
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-32B-Instruct"]
    assert "--served-model-name" in argv and "--disable-log-requests" in argv
    # 0.8 defaults (use_v2_block_manager=True, generation_config='auto', ...) are not written back.
    assert not {"--use-v2-block-manager", "--generation-config", "--scheduler-cls", "--use-tqdm-on-load"} & set(argv)


def test_a_masked_api_key_is_a_placeholder_and_recovery_refuses_without_it(runner, tmp_path, monkeypatch):
    import shutil

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.setenv("TRIAGE_LOCK_FILE", str(tmp_path / "lock"))
    bundle = tmp_path / "b"
    shutil.copytree(sample("startup-other-tenant"), bundle)       # recovery writes its lock beside the bundle
    out = json.loads(runner.invoke(main, ["classify", str(bundle), "--json"]).stdout)
    assert out["facts"]["launch"]["needs"][0]["arg"] == "api_key"
    assert "--api-key" in out["command"]                      # not silently dropped: the server stays authenticated
    plan = json.loads(runner.invoke(main, ["recover", str(bundle), "--json"]).stdout)
    assert any("the API key is not in the evidence" in n and "launch.env VLLM_API_KEY" in n for n in plan["notes"])
    res = runner.invoke(main, ["recover", str(bundle), "--execute", "--yes", "--url", "http://127.0.0.1:9"])
    assert res.exit_code == 1
    assert "the API key is not in the evidence" in res.stderr
    assert not (bundle / "actions.jsonl").exists()            # refused before the first step


def test_launch_env_in_incident_yaml_supplies_the_masked_key(runner, tmp_path, monkeypatch):
    import shutil

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    bundle = tmp_path / "b"
    shutil.copytree(sample("startup-other-tenant"), bundle)
    meta = yaml.safe_load((bundle / "incident.yaml").read_text())
    meta["launch"] = {"env": {"VLLM_API_KEY": "s3cr3t-from-the-vault"}}
    (bundle / "incident.yaml").write_text(yaml.safe_dump(meta))
    plan = json.loads(runner.invoke(main, ["recover", str(bundle), "--json"]).stdout)
    assert not any("not in the evidence" in n for n in plan["notes"])
    assert "--api-key" not in plan["new_argv"]                 # vLLM reads VLLM_API_KEY itself
    assert "VLLM_API_KEY" in plan["env"]
    assert "s3cr3t-from-the-vault" not in json.dumps(plan)     # masked in what is printed


def _rec(origin: str, args: dict, seq: int = 1) -> Evidence:
    return Evidence(source="logs/x.log", line=seq, time=None, kind=Kind.LAUNCH_CONFIG.value,
                    fields={"origin": origin, "args": args, "engine": "vllm"}, text="", seq=seq)


def test_non_default_args_false_is_the_no_form_and_none_is_dropped_with_why():
    out = rebuild([_rec("non-default args", {"model": "m", "enable_prefix_caching": False,
                                             "some_new_flag": 3, "quantization": None,
                                             "limit_mm_per_prompt": {"image": 2}})], "vllm", "0.11.0", "v1")
    assert out.argv[:3] == ["vllm", "serve", "m"]
    assert "--no-enable-prefix-caching" in out.argv
    assert out.argv[out.argv.index("--some-new-flag") + 1] == "3"
    assert out.kept_as_written == ["--some-new-flag"]
    assert [d.arg for d in out.dropped] == ["quantization"] and out.dropped[0].why
    assert out.argv[out.argv.index("--limit-mm-per-prompt") + 1] == '{"image":2}'


def test_old_vllm_writes_limit_mm_per_prompt_as_key_value_pairs():
    out = rebuild([_rec("non-default args", {"model": "m", "limit_mm_per_prompt": {"image": 2}})], "vllm", "0.6.3",
                  "v0")
    assert out.argv[-2:] == ["--limit-mm-per-prompt", "image=2"]


def test_the_most_complete_record_wins_and_a_command_line_is_kept_verbatim():
    cmd = Evidence(source="logs/x.log", line=1, time=None, kind=Kind.LAUNCH_CONFIG.value,
                   fields={"origin": "command line", "argv": ["vllm", "serve", "m", "--api-key", "***", "-tp", "2"],
                           "args": {}}, text="", seq=0)
    out = rebuild([_rec("engine config", {"model": "m"}, 5), cmd], "vllm", None, None)
    assert out.argv == ["vllm", "serve", "m", "--api-key", "***", "-tp", "2"]
    assert [m.arg for m in out.missing] == ["api_key"]


def test_the_compiled_flag_table_is_current():
    from triage.launch import COMPILED, DATA, _digest

    assert json.loads(COMPILED.read_text())["stamp"] == _digest(DATA), \
        "launch_flags.yaml changed: python -c 'from triage.launch import build; build()'"

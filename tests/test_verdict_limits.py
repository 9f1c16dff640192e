"""Verdicts that must not overstate: no all-clear from a cut input, no advice the engine refuses or
already follows, and a host OOM that names what the kernel killed with host-side advice."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from click.testing import CliRunner

from triage.advice import advise, engine_behaviour
from triage.cli import main
from triage.evidence.load import load_evidence
from triage.flowchart import decide
from triage.model import OomClass

HEALTHY_START = """\
(APIServer pid=1) INFO 10-28 09:00:12 [api_server.py:1839] vLLM API server version 0.11.0
(APIServer pid=1) INFO 10-28 09:00:12 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen2.5-14B-Instruct', 'model': 'Qwen/Qwen2.5-14B-Instruct', 'max_model_len': 32768}
(EngineCore_DP0 pid=263) INFO 10-28 09:01:41 [core.py:210] init engine (profile, create kv cache, warmup model) took 52.84 seconds
(APIServer pid=1) INFO 10-28 09:01:42 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
"""
OOM_AT_END = ("(EngineCore_DP0 pid=263) ERROR 10-28 09:05:00 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
              "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.10 GiB is free.\n")


def _verdict(*paths: str):
    verdict, incident = decide(load_evidence(list(paths)))
    advise(verdict, incident)
    return verdict


def _classify(*paths: str) -> tuple[int, dict]:
    res = CliRunner().invoke(main, ["classify", "--json", *paths])
    return res.exit_code, json.loads(res.stdout)


# --- a cut input is never an all-clear -------------------------------------------------------------

def _cut_bundle(root: Path) -> Path:
    """A bundle whose logs/vllm.log.gz holds a healthy start-up, then MiBs of access lines, then the
    OOM, with its gzip stream cut two thirds in: the start-up is read, the end is missing."""
    rnd = random.Random(7)
    filler = "".join(f"(APIServer pid=1) INFO:     10.0.0.{rnd.randint(1, 254)}:{rnd.randint(1024, 65000)} - "
                     f"\"GET /health HTTP/1.1\" 200 OK {rnd.getrandbits(64):016x}\n" for _ in range(40000))
    data = gzip.compress((HEALTHY_START + filler + OOM_AT_END).encode())
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "vllm.log.gz").write_bytes(data[: len(data) * 2 // 3])
    return root


def test_cut_gz_in_a_bundle_is_unknown_naming_the_file(tmp_path):
    bundle = _cut_bundle(tmp_path / "bundle")
    code, out = _classify(str(bundle))
    assert out["verdict"]["class"] == "unknown", out["verdict"]
    assert code == 3
    cut = [a for a in out["attach"] if "logs/vllm.log.gz" in a]
    assert cut and "cut short" in cut[0] and "line 5" in cut[0], out["attach"]
    assert "gzip" in cut[0]


def test_cut_input_refuses_the_healthy_class_even_when_uncut_parts_are_healthy(tmp_path):
    bundle = _cut_bundle(tmp_path / "bundle")
    (bundle / "logs" / "router.log").write_text(HEALTHY_START)
    verdict = _verdict(str(bundle))
    assert verdict.oom_class is OomClass.UNKNOWN
    assert any("vllm.log.gz" in a for a in verdict.attach)
    assert "cut short" in verdict.summary


def test_the_same_log_whole_is_still_healthy(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "vllm.log.gz").write_bytes(gzip.compress(HEALTHY_START.encode()))
    assert _verdict(str(tmp_path)).oom_class is OomClass.NO_OOM


# --- advice the engine would refuse, or that is already so ----------------------------------------

LONG = """\
(APIServer pid=1) INFO 10-14 09:12:03 [api_server.py:1839] vLLM API server version 0.11.0
(APIServer pid=1) INFO 10-14 09:12:03 [utils.py:233] non-default args: {{'model_tag': '{model}', 'model': '{model}', 'max_model_len': 1048576}}
(EngineCore_DP0 pid=263) ERROR 10-14 09:13:11 [core.py:708] ValueError: To serve at least one request with the models's max seq len (1048576), (128.00 GiB KV cache is needed, which is larger than the available KV cache memory (54.00 GiB). Based on the available memory, the estimated maximum model length is 442368. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""
REFUSED = """\
(APIServer pid=1) INFO 10-14 09:10:03 [api_server.py:1839] vLLM API server version 0.11.0
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/config/model.py", line 1790, in _get_and_verify_max_len
    raise ValueError(
ValueError: User-specified max_model_len (1048576) is greater than the derived max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution.
"""


def _len_rec(verdict):
    return next(r for r in verdict.recommendations if r.setting == "max_model_len")


def test_max_model_len_is_capped_at_the_maximum_vllm_stated(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(REFUSED + LONG.format(model="meta-llama/Llama-3.1-8B-Instruct"))
    verdict = _verdict(str(log))
    rec = _len_rec(verdict)
    assert rec.to_value == 131072, rec
    assert "131072" in rec.why and "vllm.log:2" in rec.why
    assert "--max-model-len 131072" in verdict.command


def test_max_model_len_is_capped_at_the_local_config(tmp_path):
    model = tmp_path / "Llama-3.1-8B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
        "rope_scaling": {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192}}))
    log = tmp_path / "vllm.log"
    log.write_text(LONG.format(model=str(model)))
    rec = _len_rec(_verdict(str(log)))
    assert rec.to_value == 131072 and "config.json" in rec.why


def test_max_model_len_without_a_stated_maximum_is_left_alone(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(LONG.format(model="meta-llama/Llama-3.1-8B-Instruct"))
    assert _len_rec(_verdict(str(log))).to_value == 442368


BURST = """\
INFO 10-28 09:00:12 [api_server.py:1839] vLLM API server version {version}
INFO 10-28 09:00:12 [utils.py:233] non-default args: {{'model_tag': 'Qwen/Qwen2.5-14B-Instruct', 'model': 'Qwen/Qwen2.5-14B-Instruct', 'max_model_len': 32768}}
INFO:     Application startup complete.
INFO 10-28 09:02:12 [loggers.py:127] Engine 000: Avg prompt throughput: 1031.5 tokens/s, Avg generation throughput: 524.6 tokens/s, Running: 13 reqs, Waiting: 0 reqs, GPU KV cache usage: 96.6%, Prefix cache hit rate: 52.1%
INFO 10-28 09:02:22 [loggers.py:127] Engine 000: Avg prompt throughput: 1091.2 tokens/s, Avg generation throughput: 911.4 tokens/s, Running: 21 reqs, Waiting: 9 reqs, GPU KV cache usage: 99.7%, Prefix cache hit rate: 58.4%
ERROR 10-28 09:02:25 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory 70.20 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated.
"""


def test_chunked_prefill_is_not_recommended_where_it_is_always_on(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(BURST.format(version="0.11.0"))
    verdict = _verdict(str(log))
    assert verdict.oom_class is OomClass.BURST
    assert "enable_chunked_prefill" not in {r.setting for r in verdict.recommendations}
    assert "chunked-prefill" not in (verdict.command or "")


def test_chunked_prefill_comes_with_a_shorter_step_where_v0_may_run(tmp_path):
    frame = ('ERROR 10-28 09:02:25 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/'
             'layers/linear.py", line 245, in apply\n')
    text = BURST.format(version="0.10.1").replace("ERROR 10-28 09:02:25 [core.py:710] torch.OutOfMemoryError",
                                                   frame + "ERROR 10-28 09:02:25 [core.py:710] torch.OutOfMemoryError")
    log = tmp_path / "vllm.log"
    log.write_text(text.replace("'max_model_len': 32768", "'max_model_len': 32768, 'enable_chunked_prefill': False"))
    recs = {r.setting: r for r in _verdict(str(log)).recommendations}
    assert recs["max_num_batched_tokens"].to_value < 32768
    assert recs["enable_chunked_prefill"].to_value is True


def test_behaviour_entries_name_their_source():
    entry = engine_behaviour("vllm", "0.11.0", "enable_chunked_prefill")
    assert entry is not None and entry["value"] is True and "arg_utils.py" in entry["source"] and "0.11" in entry["source"]
    assert engine_behaviour("vllm", "0.10.2", "enable_chunked_prefill") is None


# --- host OOM: what was killed, and host-side advice ------------------------------------------------

DMESG = """\
[81234.567890] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[81234.567990] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=1234,uid=1000
[81234.568000] Out of memory: Killed process 1234 (python3) total-vm:98765432kB, anon-rss:61234567kB, file-rss:123456kB, shmem-rss:0kB, UID:1000 pgtables:150000kB oom_score_adj:0
"""
LAUNCH = """\
INFO 10-28 09:00:12 [api_server.py:1839] vLLM API server version 0.10.1
INFO 10-28 09:00:12 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen2.5-14B-Instruct', 'model': 'Qwen/Qwen2.5-14B-Instruct', 'swap_space': 16.0, 'cpu_offload_gb': 20.0, 'tokenizer_pool_size': 4}
INFO:     Application startup complete.
"""


def test_host_oom_names_the_killed_process_and_advises_the_host(tmp_path):
    (tmp_path / "dmesg.txt").write_text(DMESG)
    (tmp_path / "vllm.log").write_text(LAUNCH)
    verdict = _verdict(str(tmp_path / "dmesg.txt"), str(tmp_path / "vllm.log"))
    assert verdict.oom_class is OomClass.NOT_GPU_OOM
    assert "python3" in verdict.summary and "PID 1234" in verdict.summary and "58.5 GiB" in verdict.summary
    recs = {r.setting: r for r in verdict.recommendations}
    assert {"swap_space", "cpu_offload_gb", "tokenizer_pool_size", "host_memory"} <= set(recs)
    assert all(r.manual for r in verdict.recommendations)
    assert recs["swap_space"].to_value == 0 and recs["cpu_offload_gb"].to_value == 0
    assert verdict.command is None


def test_host_oom_sample_names_both_kills_and_the_container_limit():
    root = Path(__file__).resolve().parent.parent / "samples" / "not-gpu-host-oom"
    verdict = _verdict(str(root))
    assert verdict.oom_class is OomClass.NOT_GPU_OOM
    assert "PID 2215904" in verdict.summary and "PID 2215713" in verdict.summary
    assert "VLLM::Worker_TP" in verdict.summary and "14.6 GiB" in verdict.summary
    recs = {r.setting: r for r in verdict.recommendations}
    assert recs["container_memory_limit"].manual
    assert "28.1 GiB" in recs["container_memory_limit"].why
    # no GPU setting is touched for host memory
    assert not {"gpu_memory_utilization", "max_model_len", "max_num_seqs"} & set(recs)


def test_engine_config_max_seq_len_is_the_maximum_only_when_the_operator_did_not_set_it(tmp_path):
    from triage.advice import model_max_len

    engine_line = ("(EngineCore_DP0 pid=263) INFO 10-14 09:12:19 [core.py:77] Initializing a V1 LLM engine (v0.11.0) "
                   "with config: model='meta-llama/Llama-3.1-8B-Instruct', tokenizer='meta-llama/Llama-3.1-8B-Instruct', "
                   "dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size=1, enable_prefix_caching=True\n")
    head = ("(APIServer pid=1) INFO 10-14 09:12:03 [api_server.py:1839] vLLM API server version 0.11.0\n"
            "(APIServer pid=1) INFO 10-14 09:12:03 [utils.py:233] non-default args: {{'model_tag': "
            "'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct'{extra}}}\n")
    for extra, expected in (("", 131072), (", 'max_model_len': 131072", None)):
        log = tmp_path / "vllm.log"
        log.write_text(head.format(extra=extra) + engine_line)
        _, incident = decide(load_evidence([str(log)]))
        found = model_max_len(incident)
        assert (found[0] if found else None) == expected, (extra, found)

"""`triage plan`: the memory arithmetic from a model's config.json, checked against the flowchart
reference and against what engines printed at start-up in tests/corpus/ and samples/ (each case
cites its line); the verdicts, recommendations and ready command line; the JSON schema; exit
codes; bad configs as one line; and the classifier's advice using the same arithmetic."""
from __future__ import annotations

import gzip
import json
import re
import shutil
from functools import lru_cache
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from triage.cli import main
from triage.errors import BadInput, ExitCode
from triage.memory import config as model_config
from triage.memory.kv import layout
from triage.memory.weights import count, weights
from triage.plan.gpus import resolve, table

from tests.conftest import CORPUS, ROOT, SAMPLES

MODELS = SAMPLES / "models"
SCHEMA = json.loads((ROOT / "triage" / "data" / "plan.schema.json").read_text())
GiB = 1 << 30


def shape(name: str):
    return model_config.load(MODELS / name)


@lru_cache(maxsize=None)
def plan_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert result.exit_code in (0, 4), result.output
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    return result.exit_code, doc


def source_line(where: str) -> str:
    """The text of `path:line` (a .gz log read decompressed; a corpus YAML by its file line)."""
    path, _, line = where.rpartition(":")
    p = ROOT / path
    text = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
    return text.splitlines()[int(line) - 1]


# --- the arithmetic against the reference --------------------------------------------------------------

def test_llama_3_1_70b_fp16_is_327680_kv_bytes_per_token_as_the_flowchart_says():
    s = shape("Llama-3.1-70B-Instruct")
    kv = layout(s, 2.0)
    assert kv.per_token == 327_680
    assert kv.sequence(4096) * 64 == 80 * GiB                      # "64 x 4,096 tokens need 80 GiB"
    assert 140e9 < weights(s, dtype_bytes=2, quant_bytes=None, quant_text=None).total < 142e9    # "~140 GB"
    _, doc = plan_json("--model", str(MODELS / "Llama-3.1-70B-Instruct"), "--gpu", "H200", "--tp", "8",
                       "--dtype", "float16")
    assert doc["figures"]["kv_bytes_per_position"]["value"] == 327_680 // 8
    assert doc["figures"]["kv_bytes_per_position"]["label"] == "computed"


@pytest.mark.parametrize("name, params", [
    ("Llama-3.1-8B-Instruct", 8_030_261_248), ("Llama-3.1-70B-Instruct", 70_553_706_496),
    ("Qwen2.5-7B-Instruct", 7_615_616_512), ("Mixtral-8x7B-Instruct-v0.1", 46_702_792_704),
    ("gemma-3-1b-it", 999_885_952),
])
def test_parameter_counts_match_the_published_totals(name, params):
    assert count(shape(name)).total == params


@pytest.mark.parametrize("name, billions", [("DeepSeek-V2-Lite-Chat", 15.7), ("Qwen2.5-VL-32B-Instruct", 33.5),
                                            ("Qwen2.5-32B-Instruct", 32.8), ("Qwen2.5-14B-Instruct", 14.8)])
def test_parameter_counts_of_mla_moe_and_vision_models_are_their_published_size(name, billions):
    assert count(shape(name)).total / 1e9 == pytest.approx(billions, rel=0.01)


def test_kv_bytes_per_token_by_attention_kind():
    mla = shape("DeepSeek-V2-Lite-Chat")           # (512 + 64) x 27 layers x 2 bytes, the same on every TP rank
    assert layout(mla, 2.0).per_token == layout(mla, 2.0, tp=4).per_token == 31_104
    assert layout(shape("Mixtral-8x7B-Instruct-v0.1"), 2.0).per_token == 2 * 32 * 8 * 128 * 2
    assert layout(shape("Mixtral-8x7B-Instruct-v0.1"), 1.0).per_token == 2 * 32 * 8 * 128      # fp8 KV cache
    llama = shape("Llama-3.1-8B-Instruct")          # 8 KV heads: 16 GPUs keep one replicated head each
    assert layout(llama, 2.0, tp=2).per_token == 65_536 and layout(llama, 2.0, tp=16).per_token == 16_384
    assert layout(llama, 2.0, pp=2).per_token == 65_536                                          # 16 layers a stage
    gemma = shape("gemma-3-1b-it")                  # 4 global layers, 22 keep 512 tokens (+ one block)
    assert gemma.layer_kinds.count("full") == 4 and gemma.window == 512
    kv = layout(gemma, 2.0)
    assert kv.sequence(32_768) == 4 * 32_768 * 1024 + 22 * (512 + 16) * 1024
    assert layout(gemma, 2.0, windows=False).sequence(32_768) == 26 * 32_768 * 1024


def test_the_safetensors_index_gives_the_real_weight_size(tmp_path):
    shutil.copy(MODELS / "Llama-3.1-8B-Instruct" / "config.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_060_522_496}}))
    s = model_config.load(tmp_path)
    w = weights(s, dtype_bytes=2, quant_bytes=None, quant_text=None)
    assert s.index_bytes == 16_060_522_496 == count(s).total * 2            # the published checkpoint is this size
    assert "model.safetensors.index.json" in w.basis
    fp32 = weights(s, dtype_bytes=4, quant_bytes=None, quant_text=None)   # --dtype float32 doubles it
    assert fp32.per_gpu == pytest.approx(2 * w.per_gpu, rel=1e-6) and "x 4/2 bytes per parameter" in fp32.basis


def test_a_quantised_checkpoint_packs_only_the_linear_layers():
    fp8 = shape("Meta-Llama-3.1-70B-Instruct-FP8")
    w = weights(fp8, dtype_bytes=2, quant_bytes=fp8.quant.bytes_per_weight, quant_text=fp8.quant.text, tp=2)
    assert fp8.quant.bytes_per_weight == 1.0 and "compressed-tensors" in fp8.quant.text
    p = count(fp8)
    assert w.per_gpu == pytest.approx((sum(p.linear) + 2 * (p.embed + p.lm_head)) / 2, rel=0.01)


# --- the plan against what the engines reported ---------------------------------------------------------
#
# One case per figure an engine printed: the log line (file:line), what it says, and the plan for the
# same model and flags (the card's total as that log states it, else the GPU table's). Within 10%.

M = str(MODELS)
LLAMA8 = ("--model", f"{M}/Llama-3.1-8B-Instruct")
A001 = (*LLAMA8, "--gpu", "23.58GiB", "--gpu-memory-utilization", "0.9", "--max-model-len", "29000",
        "--engine-version", "0.6.4")
BURST = (*LLAMA8, "--gpu", "79.35GiB", "--gpu-memory-utilization", "0.95", "--max-model-len", "32768",
         "--max-num-seqs", "256", "--engine-version", "0.6.3")
HEALTHY = ("--model", f"{M}/Qwen2.5-14B-Instruct", "--gpu", "H100", "--max-model-len", "32768",
           "--engine-version", "0.11.0")
FRAG = (*LLAMA8, "--gpu", "79.19GiB", "--gpu-memory-utilization", "0.85", "--max-model-len", "32768",
        "--engine-version", "0.11.0")
LEAK = ("--model", f"{M}/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "--gpu-memory-utilization", "0.75",
        "--max-model-len", "32768", "--engine-version", "0.33.0")
BLOWOUT = (*LLAMA8, "--gpu", "L4", "--max-model-len", "131072", "--engine-version", "0.11.0")
XID = ("--model", f"{M}/Meta-Llama-3.1-70B-Instruct-FP8", "--gpu", "H100", "--tp", "2", "--max-model-len", "32768",
       "--engine-version", "0.11.0")
HOST = ("--model", f"{M}/Qwen2.5-VL-32B-Instruct", "--gpu", "L40S", "--tp", "2", "--gpu-memory-utilization", "0.9",
        "--max-model-len", "16384", "--engine-version", "0.33.0")
SAMPLER = ("--model", f"{M}/Qwen2.5-32B-Instruct", "--gpu", "L40S", "--tp", "2", "--gpu-memory-utilization", "0.95",
           "--max-num-seqs", "1024", "--max-model-len", "32768", "--engine-version", "0.8.5")
PREFIX = ("--model", f"{M}/Llama-3.1-70B-Instruct", "--gpu", "79.35GiB", "--tp", "8", "--gpu-memory-utilization",
          "0.95", "--max-num-seqs", "4096", "--max-model-len", "8192", "--engine-version", "0.6.0")
FLEET = ("--model", f"{M}/llava-next-llama3-70b", "--gpu", "79.35GiB", "--tp", "4", "--gpu-memory-utilization",
         "0.95", "--max-num-seqs", "256", "--max-model-len", "8192", "--engine-version", "0.6.0")
BLOCK = 16

# Per log: the plan's flags, then (line, the number as the engine printed it, its value, the plan's figure).
G = GiB
KV, TOKENS, CONC, LONGEST, WEIGHTS = "kv_cache", "kv_capacity_tokens", "max_concurrency", "longest_sequence", \
    "weights_per_gpu"
LOGS = [
    ("tests/corpus/startup-a-001.yaml", A001, [
        (9, "kv_cache_size=2.89GiB", 2.89 * G, KV), (10, "# GPU blocks: 1478", 1478 * BLOCK, TOKENS),
        (11, "0.82x", 0.82, CONC), (12, "KV cache (23648)", 23648, LONGEST), (8, "14.9888 GB", 14.9888 * G, WEIGHTS)]),
    ("samples/burst-long-prompts-v0/logs/vllm.log", BURST, [
        (14, "# GPU blocks: 28426", 28426 * BLOCK, TOKENS), (15, "13.88x", 13.88, CONC)]),
    ("samples/healthy-no-oom/logs/vllm.log", HEALTHY, [
        (35, "41.18 GiB", 41.18 * G, KV), (36, "224,880 tokens", 224_880, TOKENS), (37, "6.86x", 6.86, CONC),
        (29, "27.5146 GiB", 27.5146 * G, WEIGHTS)]),
    ("samples/chronic-fragmentation/logs/vllm.log.gz", FRAG, [
        (31, "49.78 GiB", 49.78 * G, KV), (32, "407,824 tokens", 407_824, TOKENS), (33, "12.45x", 12.45, CONC)]),
    ("samples/chronic-leak-nvidia-smi/logs/vllm.log.gz", LEAK, [
        (22, "43.27 GiB", 43.27 * G, KV), (24, "810,272 tokens", 810_272, TOKENS), (24, "24.73x", 24.73, CONC),
        (18, "14.25 GiB", 14.25 * G, WEIGHTS)]),
    ("samples/startup-kv-blowout-v1/logs/vllm.log", BLOWOUT, [
        (31, "3.57 GiB", 3.57 * G, KV), (48, "length is 29216", 29216, LONGEST)]),
    ("samples/not-gpu-xid-fault/logs/vllm.log", XID, [
        (15, "34.27 GiB", 34.27 * G, KV), (17, "224,576 tokens", 224_576, TOKENS), (18, "6.85x", 6.85, CONC),
        (13, "33.8815 GiB", 33.8815 * G, WEIGHTS)]),
    ("samples/not-gpu-host-oom/logs/vllm.log", HOST, [
        (22, "6.79 GiB", 6.79 * G, KV), (24, "55,632 tokens", 55_632, TOKENS), (24, "3.40x", 3.40, CONC),
        (19, "31.82 GiB", 31.82 * G, WEIGHTS)]),
    ("samples/startup-sampler-warmup/logs/vllm.log", SAMPLER, [
        (50, "47,776 tokens", 47_776, TOKENS), (51, "1.46x", 1.46, CONC), (38, "30.5856 GiB", 30.5856 * G, WEIGHTS)]),
    ("samples/prefix-cache-oom-b/logs/vllm.log.gz", PREFIX, [
        (73, "# GPU blocks: 65559", 65_559 * BLOCK, TOKENS), (65, "16.4606 GB", 16.4606 * G, WEIGHTS)]),
    ("samples/incident-a-multimodal-fleet/logs/gpu-node-07.log", FLEET, [
        (42, "# GPU blocks: 31170", 31_170 * BLOCK, TOKENS), (38, "33.0714 GB", 33.0714 * G, WEIGHTS)]),
    ("samples/incident-a-multimodal-fleet/logs/gpu-node-21.log", FLEET, [
        (42, "# GPU blocks: 31170", 31_170 * BLOCK, TOKENS)]),
]
COMPARISONS = [(f"{path}:{line}", printed, value, args, figure)
               for path, args, figures in LOGS for line, printed, value, figure in figures]


@pytest.mark.parametrize("where, printed, value, args, figure", COMPARISONS,
                         ids=[f"{c[0]} {c[4]}" for c in COMPARISONS])
def test_plan_lands_within_10_percent_of_what_the_engine_reported(where, printed, value, args, figure):
    assert printed in source_line(where), f"{where} no longer says {printed!r}"
    _, doc = plan_json(*args)
    planned = doc["figures"][figure]["value"]
    assert planned == pytest.approx(value, rel=0.10), (where, printed, planned)


# Logs that name neither the card nor its size: the plan's KV layout applied to the pool the engine
# sized must give the concurrency the engine printed, and its weights the size the engine loaded.
@pytest.mark.parametrize("where, printed, model, pool_tokens, length, concurrency, windows", [
    ("tests/corpus/no_oom-c-012.yaml:19", "1.97x", "Qwen2.5-7B-Instruct", 4025 * BLOCK, 32768, 1.97, True),
    ("tests/corpus/no_oom-c-004.yaml:15", "34.78x", "gemma-3-1b-it", 1_139_728, 32768, 34.78, False),
])
def test_concurrency_from_the_engines_own_pool(where, printed, model, pool_tokens, length, concurrency, windows):
    assert printed in source_line(where)
    kv = layout(shape(model), 2.0, windows=windows)      # vLLM 0.8 gave Gemma 3's sliding layers a full cache
    assert kv.full * pool_tokens / kv.sequence(length) == pytest.approx(concurrency, rel=0.01)


@pytest.mark.parametrize("where, printed, model, gib", [
    ("tests/corpus/no_oom-c-012.yaml:17", "14.2487 GB", "Qwen2.5-7B-Instruct", 14.2487),
    ("tests/corpus/no_oom-c-004.yaml:9", "1.9134 GB", "gemma-3-1b-it", 1.9134),
])
def test_weights_of_the_logs_without_a_card(where, printed, model, gib):
    assert printed in source_line(where)
    w = weights(shape(model), dtype_bytes=2, quant_bytes=None, quant_text=None)
    assert w.per_gpu == pytest.approx(gib * GiB, rel=0.10)


def test_the_kv_blowout_sample_needs_exactly_the_16_gib_vllm_said():
    assert "(16.00 GiB KV cache is needed" in source_line("samples/startup-kv-blowout-v1/logs/vllm.log:48")
    assert layout(shape("Llama-3.1-8B-Instruct"), 2.0).sequence(131_072) == 16 * GiB


# --- verdicts, recommendations, command ------------------------------------------------------------------

def test_the_kv_blowout_flags_fail_at_startup_and_the_fix_is_the_longest_that_fits():
    code, doc = plan_json(*BLOWOUT)
    assert code == ExitCode.WILL_FAIL == 4
    assert doc["verdict"]["result"] == "will_fail_at_startup" and doc["verdict"]["fails"]
    [rec] = [r for r in doc["recommendations"] if r["setting"] == "max_model_len"]
    assert rec["from"] == 131072 and rec["to"] == doc["figures"]["longest_sequence"]["value"]
    assert f"--max-model-len {rec['to']}" in doc["command"] and doc["command"].startswith("vllm serve meta-llama/")
    assert doc["figures"]["profile_peak"]["label"] == "estimated" and "2,048 tokens" in doc["figures"]["profile_peak"]["basis"]


def test_a_plan_that_fits_exits_0_and_says_why():
    code, doc = plan_json(*LLAMA8, "--gpu", "H100", "--max-model-len", "8192", "--max-num-seqs", "32")
    assert code == 0 and doc["verdict"]["result"] == "fits" and doc["verdict"]["burst"] is None
    assert "--max-num-seqs 32" in doc["command"]


def test_a_burst_that_fills_the_kv_cache_is_tight_with_its_n_x_l_and_a_cap():
    code, doc = plan_json(*LLAMA8, "--gpu", "H100", "--max-model-len", "32768")
    burst = doc["verdict"]["burst"]
    assert code == 0 and doc["verdict"]["result"] == "tight"
    assert burst["sequences"] == 1024 and burst["sequences"] * burst["tokens"] <= doc["figures"]["kv_capacity_tokens"]["value"]
    assert (burst["tokens"] + 1) * 1024 > doc["figures"]["kv_capacity_tokens"]["value"]
    cap = next(r for r in doc["recommendations"] if r["setting"] == "max_num_seqs")
    assert cap["to"] == int(doc["figures"]["max_concurrency"]["value"]) and f"--max-num-seqs {cap['to']}" in doc["command"]


def test_no_headroom_outside_the_budget_fails_under_a_burst():
    code, doc = plan_json(*BURST)           # the burst sample's own flags: gpu_memory_utilization 0.95
    assert code == 4 and doc["verdict"]["result"] == "will_fail_under_burst"
    assert doc["verdict"]["reasons"][0].startswith("burst OOM likelihood high: card 79.35 GiB - budget 75.38 GiB")
    assert doc["verdict"]["burst_likelihood"] == "high"
    [fix] = [r for r in doc["recommendations"] if r["setting"] in ("gpu_memory_utilization", "max_num_batched_tokens")]
    assert fix["to"] < fix["from"] and "burst OOM likelihood" in fix["why"]
    flag = "--" + fix["setting"].replace("_", "-")
    assert f"{flag} {fix['to']:g}" in doc["command"]


def test_another_tenant_on_the_gpu_fails_vllm_v1s_free_memory_check():
    # samples/startup-other-tenant: 48,338 MiB held by another process, vLLM asks for 0.9 of an H100
    code, doc = plan_json("--model", f"{M}/Qwen2.5-32B-Instruct", "--gpu", "H100", "--max-model-len", "16384",
                          "--gpu-memory-utilization", "0.9", "--other-tenants-bytes", "48338MiB")
    assert code == 4 and "other processes" in doc["verdict"]["reasons"][0]
    settings = {r["setting"]: r for r in doc["recommendations"]}
    assert settings["gpu_memory_utilization"]["to"] == 0.37          # (79.18 - 47.21 - 0.55) / 79.18 - 2%
    assert "tensor_parallel_size" in settings and "--tensor-parallel-size" in doc["command"]


def test_weights_larger_than_the_card_get_tensor_parallelism_or_a_bigger_gpu():
    code, doc = plan_json("--model", f"{M}/Llama-3.1-70B-Instruct", "--gpu", "H100", "--max-model-len", "8192")
    assert code == 4 and "weights alone" in doc["verdict"]["reasons"][0]
    settings = {r["setting"]: r for r in doc["recommendations"]}
    assert settings["tensor_parallel_size"]["to"] == 2
    assert settings["gpu"]["manual"] and settings["gpu"]["to"] == doc["smallest_gpu_it_runs_on"]


def test_sglang_sizes_the_pool_from_mem_fraction_static():
    code, doc = plan_json("--model", f"{M}/DeepSeek-V2-Lite-Chat", "--gpu", "A100-80GB", "--engine", "sglang",
                          "--max-model-len", "32768")
    s = doc["settings"]
    # sglang/srt/server_args.py:449-496 (0.5.2): gpu_mem is nvidia-smi's total in MiB (utils.py
    # get_nvgpu_memory_capacity), 81,920 for an A100-80GB; reserved 9.5 + 1/2 GiB
    assert s["gpu_memory_utilization"]["value"] == round((81920 - 10 * 1024) / 81920, 3) == 0.875
    assert doc["figures"]["kv_bytes_per_block"]["value"] == doc["figures"]["kv_bytes_per_position"]["value"] == 31_104
    assert doc["command"].startswith("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V2-Lite-Chat")
    assert "--context-length 32768" in doc["command"] and "--mem-fraction-static" in doc["command"]
    assert doc["model"]["attention"] == "MLA" and doc["model"]["experts"] == 64


def test_old_vllm_captures_graphs_outside_the_budget():
    old = plan_json(*LLAMA8, "--gpu", "H100", "--max-model-len", "8192", "--engine-version", "0.6.3")[1]
    new = plan_json(*LLAMA8, "--gpu", "H100", "--max-model-len", "8192", "--engine-version", "0.21")[1]
    assert "outside the budget" in old["figures"]["cuda_graphs"]["basis"]
    assert "inside the budget" in new["figures"]["cuda_graphs"]["basis"]
    eager = plan_json(*LLAMA8, "--gpu", "H100", "--max-model-len", "8192", "--enforce-eager")[1]
    assert eager["figures"]["cuda_graphs"]["value"] == 0 and "--enforce-eager" in eager["command"]


def test_the_gpu_table_names_the_smallest_gpu_and_what_each_supports():
    _, doc = plan_json("--model", f"{M}/Llama-3.1-70B-Instruct", "--gpu", "H100", "--max-model-len", "8192",
                       "--max-num-seqs", "8")
    rows = {r["name"]: r for r in doc["gpus"]}
    assert [r["class_gb"] for r in doc["gpus"]] == sorted(r["class_gb"] for r in doc["gpus"])
    assert {24, 40, 48, 80, 94, 141, 192} <= {r["class_gb"] for r in doc["gpus"]}
    assert rows["H100"]["verdict"] == "will_fail_at_startup" and rows["H100"]["max_num_seqs"] == 0
    smallest = doc["smallest_gpu_it_runs_on"]
    assert rows[smallest]["verdict"] in ("fits", "tight")
    assert all(r["verdict"].startswith("will_fail") for r in doc["gpus"] if r["memory_bytes"] < rows[smallest]["memory_bytes"])
    assert rows[smallest]["max_num_seqs"] == rows[smallest]["kv_cache_bytes"] // (8192 * 327_680) >= 1


def test_gpu_names_and_sizes():
    assert resolve("a100-80gb").name == resolve("A100").name == "A100-80GB"
    assert resolve("NVIDIA H100").name == "H100" and resolve("l4").memory == int(22.05 * GiB)
    assert resolve("85899345920").memory == 80 * GiB and resolve("80GiB").memory == 80 * GiB
    assert all(g.estimated == ("estimated:" in g.source) for g in table())


REQUIRED_CARDS = ["A10", "A10G", "A30", "A40", "A100-40GB", "A100-80GB", "A800", "L4", "L20", "L40", "L40S", "H20",
                  "H100 PCIe", "H100", "H100 NVL", "H200", "B200", "GB200", "MI250", "MI300X", "T4", "V100-16GB",
                  "V100-32GB", "RTX 3090", "RTX 4090", "RTX 5090", "RTX A6000", "RTX 6000 Ada"]


def test_the_gpu_table_covers_the_cards_people_run_each_with_its_source():
    names = {g.name: g for g in table()}
    assert set(REQUIRED_CARDS) <= set(names)
    for g in names.values():
        assert g.source.startswith("gpus.yaml, ") and ("as printed in" in g.source or "estimated:" in g.source)
        assert g.class_gb is not None and g.memory < g.class_gb * GiB      # below the size it is sold as
    assert names["H100"].memory == int(79.18 * GiB) and names["H100"].smi_mib == 81559


def test_l40_is_not_l40s_and_80gb_is_the_card_class_with_a_note():
    assert resolve("L40").name == "L40" and resolve("l40s").name == "L40S"
    assert resolve("NVIDIA GeForce RTX 4090").name == "RTX 4090"
    card = resolve("80GB")
    assert card.class_gb == 80 and card.memory < 80 * GiB and card.memory != int(80e9)
    assert "80 GB card class" in card.note and "not 80e9 bytes" in card.note
    assert resolve("80GiB").memory == 80 * GiB and "80.00 GiB" in resolve("80GiB").note
    with pytest.raises(Exception, match="no card of the table is sold as 77 GB"):
        resolve("77GB")
    _, doc = plan_json(*LLAMA8, "--gpu", "80GB", "--max-model-len", "8192")
    assert doc["gpu"]["note"].startswith("--gpu 80GB read as the 80 GB card class")


# --- the command line ---------------------------------------------------------------------------------

def test_text_output_labels_every_figure_and_shows_the_command():
    result = CliRunner().invoke(main, ["plan", *BLOWOUT], env={"COLUMNS": "100"})
    assert result.exit_code == 4
    out = result.stdout
    assert "verdict: will fail at start-up" in out and "131,072 bytes  KV cache per token (computed;" in out
    assert re.search(r"profiling peak \(activations\) \(estimated; the larger \((forward pass|sampler)\) of the\s+"
                     r"forward\s+pass\s+2,048\s+tokens", out)
    assert "command:\n  vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len" in out
    assert "smallest GPU it runs on" in out and "***" not in out


@pytest.mark.parametrize("content, problem", [
    (None, "not a local file or folder: give the model's config.json or its folder"),
    ("{not json", "invalid JSON at line 1"),
    ('{"hidden_size": 4096}', "num_hidden_layers is missing"),
    ("[1, 2]", "not a Hugging Face config"),
    ('{"hidden_size": 4096, "num_hidden_layers": "many", "num_attention_heads": 32}', "not a whole number"),
    ('{"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 8,'
     ' "quantization_config": {"quant_method": "mystery"}}', "no bit width"),
])
def test_a_bad_config_is_one_line_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(main, ["plan", "--model", str(path), "--gpu", "H100"])
    assert result.exit_code == ExitCode.BAD_INPUT
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"triage: {path}") and problem in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_one_sequence_is_a_sequence():
    result = CliRunner().invoke(main, ["plan", *LLAMA8, "--gpu", "L4", "--max-model-len", "49152", "--max-num-seqs", "1"],
                                env={"COLUMNS": "200"})
    out = result.stdout
    assert "1 sequence of 49,152 at once" in out and "sampler 1 sequence x 128,256 vocabulary" in out
    assert "1 byte per parameter" in out and "0.5 bytes per parameter" in out
    assert not re.search(r"\b1 sequences\b|byte\(s\)", out)


def test_a_hub_name_points_to_a_local_config():
    result = CliRunner().invoke(main, ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4"])
    assert result.exit_code == ExitCode.BAD_INPUT
    local = MODELS / "Llama-3.1-8B-Instruct"       # shown from the working directory when under it
    shown = local.relative_to(Path.cwd()) if local.is_relative_to(Path.cwd()) else local
    assert result.stderr.strip().splitlines() == [
        "triage: meta-llama/Llama-3.1-8B-Instruct: not a local file or folder: give the model's config.json or "
        f"its folder (e.g. {shown})"]
    result = CliRunner().invoke(main, ["plan", "--model", "acme/NoSuchModel-7B", "--gpu", "L4"])
    assert result.exit_code == ExitCode.BAD_INPUT and "(e.g. one in " in result.stderr


def test_a_folder_without_config_json_and_binary_garbage(tmp_path):
    result = CliRunner().invoke(main, ["plan", "--model", str(tmp_path), "--gpu", "H100"])
    assert result.exit_code == 1 and "without config.json" in result.stderr
    (tmp_path / "config.json").write_bytes(b"\x00\xff\xfe" * 100)
    result = CliRunner().invoke(main, ["plan", "--model", str(tmp_path), "--gpu", "H100"])
    assert result.exit_code == 1 and "config.json" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("args", [
    ["--gpu", "H100"], ["--gpu", "a potato"], ["--gpu", "H100", "--tp", "0"],
    ["--gpu", "H100", "--gpu-memory-utilization", "1.5"], ["--gpu", "H100", "--other-tenants-bytes", "lots"],
    ["--gpu", "H100", "--engine", "tgi"],
])
def test_usage_errors_exit_2(args):
    model = [] if args == ["--gpu", "H100"] else ["--model", f"{M}/Llama-3.1-8B-Instruct"]
    result = CliRunner().invoke(main, ["plan", *model, *args])
    assert result.exit_code == ExitCode.USAGE, result.output


def test_plan_is_registered_lazily_and_documented_in_help():
    result = CliRunner().invoke(main, ["--help"])
    assert "plan" in result.stdout
    assert "4 will fail" in CliRunner().invoke(main, ["plan", "--help"]).stdout


# --- the classifier's advice uses the same arithmetic -----------------------------------------------------

def test_the_advice_computes_from_config_json_when_the_launch_names_a_local_model_folder(tmp_path):
    from triage.evidence import load_evidence
    from triage.fit import gather
    from triage.flowchart import decide

    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLES / "startup-other-tenant", bundle)
    log = bundle / "logs" / "vllm.log"
    folder = MODELS / "Qwen2.5-32B-Instruct"
    log.write_text(log.read_text().replace("'model': 'Qwen/Qwen3-32B'", f"'model': '{folder}'"))
    fit = gather(decide(load_evidence([str(bundle)]))[1])
    expected = weights(shape("Qwen2.5-32B-Instruct"), dtype_bytes=2, quant_bytes=None, quant_text=None)
    assert fit.weights.bytes == expected.per_gpu and not fit.weights.estimated
    assert str(folder / "config.json") in fit.weights.source
    assert fit.kv_one_seq.bytes == layout(shape("Qwen2.5-32B-Instruct"), 2.0).sequence(32768)


def test_the_samples_models_readme_lists_every_config():
    readme = (MODELS / "README.md").read_text()
    for folder in sorted(p for p in MODELS.iterdir() if p.is_dir()):
        cfg = json.loads((folder / "config.json").read_text())
        assert f"`{folder.name}`" in readme and cfg["_name_or_path"] in readme, folder.name
    assert yaml.safe_load((ROOT / "triage" / "data" / "gpus.yaml").read_text())["gpus"]


def test_bad_input_is_a_triage_error():
    with pytest.raises(BadInput):
        model_config.load(CORPUS / "no-such-config.json")

"""`triage plan` sizes as a vLLM release it has read: the refusals the engine makes at start-up,
in its own words; the attention layout by release (MLA's latent cache from 0.7.1); every default
with the file it was read in; the burst likelihood from the headroom outside the budget; and the
alternatives that fit, best first."""
from __future__ import annotations

import pytest
import yaml

from triage.memory import config as model_config
from triage.memory.kv import layout
from triage.plan.alternatives import alternatives
from triage.plan.engines import sizing
from triage.plan.gpus import resolve
from triage.plan.plan import FAILS_BURST, FAILS_STARTUP, FITS, TIGHT, Request, evaluate
from triage.plan.releases import DATA, pick, releases

from tests.conftest import ROOT, SAMPLES

MODELS = SAMPLES / "models"
GiB = 1 << 30


def shape(name: str):
    return model_config.load(MODELS / name)


# --- refusals ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["Llama-3.1-8B-Instruct", "Qwen2.5-7B-Instruct", "Mixtral-8x7B-Instruct-v0.1",
                                   "DeepSeek-V2-Lite-Chat"])
def test_tp_3_is_refused_with_vllms_own_words(model):
    s = shape(model)
    o = evaluate(s, resolve("H100"), Request(tp=3, max_model_len=4096), sizing("vllm", None))
    assert o.verdict == FAILS_STARTUP
    assert f"Total number of attention heads ({s.heads}) must be divisible by tensor parallel size (3)." in o.refused[0]
    assert "vllm/config/model.py" in o.refused[0]


def test_kv_heads_replicated_over_more_gpus_are_accepted_when_they_divide():
    s = shape("Llama-3.1-8B-Instruct")                      # 32 heads, 8 KV heads
    assert not evaluate(s, resolve("H100"), Request(tp=16, max_model_len=4096), sizing("vllm", None)).refused
    gemma = shape("gemma-3-1b-it")                          # 4 heads, 1 KV head: tp 2 and 4 replicate it
    assert not evaluate(gemma, resolve("L4"), Request(tp=2, max_model_len=4096), sizing("vllm", None)).refused


def test_a_length_past_the_models_maximum_is_refused_unless_the_override_is_set():
    s = shape("Qwen2.5-7B-Instruct")                        # max_position_embeddings 32768, no rope scaling
    z = sizing("vllm", None)
    refused = evaluate(s, resolve("H100"), Request(max_model_len=65536), z)
    assert refused.verdict == FAILS_STARTUP
    assert "User-specified max_model_len (65536) is greater than the derived max_model_len " \
           "(max_position_embeddings=32768" in refused.refused[0]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in refused.refused[0]
    assert not evaluate(s, resolve("H100"), Request(max_model_len=65536, allow_long=True), z).refused


def test_the_derived_maximum_applies_yarn_scaling_as_vllm_does():
    s = shape("DeepSeek-V2-Lite-Chat")                      # yarn: 4096 x 40
    assert s.derived_max_len == 163_840 and "x rope_scaling factor 40 (yarn)" in s.derived_max_key


# --- attention layout by release ------------------------------------------------------------------------

@pytest.mark.parametrize("version, per_token", [
    ("0.5.5", 2 * 27 * 8 * 256 * 2),        # full K/V, 16 heads / 2 GPUs, padded to 256
    ("0.6.4", 2 * 27 * 8 * 256 * 2),
    ("0.7.0", 2 * 27 * 8 * 192 * 2),        # full K/V, head size qk_nope 128 + qk_rope 64, V padded to it
    ("0.7.1", (512 + 64) * 27 * 2),         # MLA: one latent vector per token and layer
    ("0.11.0", (512 + 64) * 27 * 2),
])
def test_mla_models_are_cached_as_the_release_did(version, per_token):
    s = shape("DeepSeek-V2-Lite-Chat")
    o = evaluate(s, resolve("L40"), Request(tp=2, max_model_len=4096), sizing("vllm", version))
    assert o.kv.per_token == per_token


def test_deepseek_coder_v2_lite_on_05_at_its_default_length_fails_where_0_11_starts():
    s = shape("DeepSeek-V2-Lite-Chat")
    old = evaluate(s, resolve("L40"), Request(tp=2), sizing("vllm", "0.5.4"))
    new = evaluate(s, resolve("L40"), Request(tp=2), sizing("vllm", "0.11.0"))
    assert old.verdict == FAILS_STARTUP and new.verdict in (FITS, TIGHT)


# --- which release, and where each default comes from ---------------------------------------------------

def test_a_version_is_sized_as_the_newest_release_read_at_or_below_it():
    assert pick("0.11.0")[0].version == "0.11.0" and pick("0.11.0")[1] == "vLLM 0.11.0"
    rel, note = pick("0.12.3")
    assert rel.version == "0.11.0" and "sized as 0.11.0" in note
    assert pick(None)[0].version == releases()[-1].version and "newest release this plan has read" in pick(None)[1]
    assert pick("0.1.0")[0].version == releases()[0].version


def test_every_release_fact_cites_a_file_of_that_release():
    raw = yaml.safe_load(DATA.read_text())
    for item in raw["releases"]:
        for key in ("default_util", "graphs_in_budget", "hybrid_kv", "mla", "non_torch"):
            src = item[key]["source"]
            assert src.startswith("vllm/") and f"({item['version']})" in src, (item["version"], key, src)
        assert f"({item['version']})" in item["batch_defaults"]["source"]


def test_the_defaults_say_which_release_and_file_they_come_from():
    z = sizing("vllm", None)
    d = z.defaults(resolve("H200").memory, False, 32768, 1, 1)
    assert d["gpu_memory_utilization"][0] == 0.92 and "vllm/config/cache.py:215 (0.33.0)" in d["gpu_memory_utilization"][1]
    assert d["max_num_batched_tokens"][0] == 8192                 # H200 is under 160 GiB
    b200 = z.defaults(resolve("B200").memory, False, 32768, 1, 1)
    assert b200["max_num_batched_tokens"][0] == 16384 and "arg_utils.py" in b200["max_num_batched_tokens"][1]
    a100 = sizing("vllm", "0.11.0").defaults(resolve("A100-80GB").memory, True, 32768, 1, 1)
    assert a100["max_num_batched_tokens"][0] == 2048 and a100["gpu_memory_utilization"][0] == 0.9
    v0 = sizing("vllm", "0.6.4").defaults(resolve("H100").memory, False, 65536, 1, 1)
    assert v0["max_num_batched_tokens"][0] == 512                  # V0 chunks prefill past 32K


# --- burst likelihood and the alternatives ---------------------------------------------------------------

def test_70b_on_two_h100_at_095_is_not_blocked_by_a_flat_rule():
    s = shape("Llama-3.1-70B-Instruct")
    o = evaluate(s, resolve("H100"), Request(tp=2, util=0.95, max_model_len=16384), sizing("vllm", None))
    assert o.verdict in (FITS, TIGHT) and o.risk.likelihood in ("low", "moderate")
    assert "spare against" in o.risk.arithmetic


def test_the_burst_samples_flags_are_a_high_likelihood():
    s = shape("Llama-3.1-8B-Instruct")
    o = evaluate(s, resolve("79.35GiB"), Request(util=0.95, max_model_len=32768, max_num_seqs=256),
                 sizing("vllm", "0.6.3"))
    assert o.verdict == FAILS_BURST and o.risk.likelihood == "high" and o.risk.spare < o.risk.need


def test_alternatives_are_each_checked_and_ranked_best_first():
    s = shape("Llama-3.1-70B-Instruct")
    req = Request(tp=2, util=0.9, max_model_len=16384)      # 2.5 GiB a sequence, 1.7 GiB of KV cache
    o = evaluate(s, resolve("H100"), req, sizing("vllm", None))
    assert o.verdict == FAILS_STARTUP
    alts = alternatives(s, o, req, sizing("vllm", None), evaluate)
    settings = [a.setting for a in alts]
    assert "kv_cache_dtype" in settings and "tensor_parallel_size" in settings
    assert settings.index("kv_cache_dtype") < settings.index("tensor_parallel_size")   # flags before more GPUs
    for a in alts:
        assert a.verdict in (FITS, TIGHT) and "tokens at" in a.arithmetic


def test_the_gpu_table_is_read_from_one_file():
    assert (ROOT / "triage" / "data" / "gpus.yaml").is_file()
    assert resolve("L40").name != resolve("L40S").name


def test_the_multi_gpu_non_torch_term_is_nccl_and_custom_all_reduce_from_the_sources():
    from triage.memory import estimate as e
    assert e.NCCL_BYTES_PER_CONNECTION == 4 * 2**20 + 512 * 2**10 + 4_915_200      # NCCL 2.21 src/init.cc defaults
    v1 = e.multi_gpu_non_torch(4, "device", v1=True)
    assert v1.bytes == 2 * 3 * e.NCCL_BYTES_PER_CONNECTION + 2 * 8 * 2**20 and "custom_all_reduce.py" in v1.basis
    assert e.multi_gpu_non_torch(4, "device", v1=False).bytes == v1.bytes + e.NCCL_PER_COMMUNICATOR  # torch's comm too
    assert e.multi_gpu_non_torch(3, "device").bytes == e.NCCL_PER_COMMUNICATOR          # no custom all-reduce at 3
    assert e.multi_gpu_non_torch(2, "dist").bytes == e.NCCL_PER_COMMUNICATOR            # made before the snapshot
    assert e.non_torch(1, "device").bytes == e.NON_TORCH_V1


def test_0_6_5_is_read_from_its_own_wheel():
    rel, note = pick("0.6.5")
    assert rel.version == "0.6.5" and note == "vLLM 0.6.5"
    assert rel.non_torch.value == "context" and rel.chunked_tokens == 2048 and pick("0.6.4")[0].chunked_tokens is None
    d = sizing("vllm", "0.6.5").defaults(resolve("H100").memory, False, 65536, 1, 1)
    assert d["max_num_batched_tokens"][0] == 2048

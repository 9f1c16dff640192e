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


def test_a_local_build_or_pre_release_is_sized_as_its_own_release_line():
    # '0.8.2+cu124' once read as 0.8.2124 and picked a newer release than the one running
    assert pick("0.8.2+cu124")[0].key <= (0, 8, 2)
    assert pick("0.8.5rc1")[0].key <= (0, 8, 5)
    assert pick("0.9.1.dev277")[0].key == pick("0.9.1")[0].key


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
    assert e.non_torch(1, "device").bytes == e.NON_TORCH_DEVICE                         # the context included
    assert e.non_torch(1, "dist").bytes == e.non_torch(1, "context").bytes == e.NON_TORCH_WORKSPACES


def test_0_6_5_is_read_from_its_own_wheel():
    rel, note = pick("0.6.5")
    assert rel.version == "0.6.5" and note == "vLLM 0.6.5"
    assert rel.non_torch.value == "context" and rel.chunked_tokens == 2048 and pick("0.6.4")[0].chunked_tokens is None
    d = sizing("vllm", "0.6.5").defaults(resolve("H100").memory, False, 65536, 1, 1)
    assert d["max_num_batched_tokens"][0] == 2048


# --- sliding-window layers in vLLM's printed KV figures -------------------------------------------

def _phi3_like() -> dict:
    """Phi-3-mini's shape (config.json: 32 layers, 32 heads of 96, sliding_window 2047, no layer_types):
    vLLM makes every layer a sliding-window one (engine/arg_utils.py: not is_interleaved ->
    CacheConfig.sliding_window; attention takes it when the layer names none)."""
    return {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
            "intermediate_size": 8192, "vocab_size": 32064, "max_position_embeddings": 4096,
            "sliding_window": 2047, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def test_vllm_prints_the_pool_in_token_slots_of_every_layer_even_for_sliding_window_layers():
    s = model_config.parse(_phi3_like(), "phi3.json")
    assert set(s.layer_kinds) == {"sliding"}
    o = evaluate(s, resolve("RTX 3090"), Request(max_model_len=4096, util=0.85, dtype="float16"),
                 sizing("vllm", "0.19.1"))
    per_block = 16 * 2 * 32 * 32 * 96 * 2              # 16 tokens x K and V x 32 layers x 32 heads x 96 x 2 bytes
    assert o.kv.per_block == per_block
    # kv_cache_utils.py _report_kv_cache_config: num_blocks // len(kv_cache_groups) x block_size, one group here
    assert o.capacity == o.pool // per_block * 16
    # SlidingWindowSpec.max_memory_usage_bytes: cdiv(min(2047 - 1 + 2048, 4096), 16) + 1 = 257 blocks a request
    assert o.one_seq == 257 * per_block
    assert o.concurrency == pytest.approx(o.pool / (257 * per_block))


def test_the_window_counts_max_num_batched_tokens_past_it_as_vllm_allocates_during_chunked_prefill():
    s = model_config.parse({**_phi3_like(), "max_position_embeddings": 131072}, "phi3-long.json")
    o = evaluate(s, resolve("H100"), Request(max_model_len=131072, max_num_batched_tokens=4096),
                 sizing("vllm", "0.19.1"))
    # min(2047 - 1 + 4096, 131072) = 6142 tokens -> 384 blocks + 1
    assert o.one_seq == 385 * o.kv.per_block
    assert o.capacity == o.pool // o.kv.per_block * 16


def test_before_the_hybrid_allocator_sliding_layers_keep_every_token():
    s = model_config.parse(_phi3_like(), "phi3.json")
    o = evaluate(s, resolve("RTX 3090"), Request(max_model_len=4096), sizing("vllm", "0.8.5"))
    assert o.one_seq == 256 * o.kv.per_block and o.capacity == o.pool // o.kv.per_block * 16


# --- SGLang's defaults by release -----------------------------------------------------------------

def _sglang(version, gpu, tp=1, pp=1):
    g = resolve(gpu)
    z = sizing("sglang", version)
    return z, z.defaults(g.memory, g.a100, 32768, tp, pp, g.smi_mib)


@pytest.mark.parametrize("tp,frac", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_sglang_0_4_sets_mem_fraction_static_by_tensor_parallelism(tp, frac):
    # sglang/srt/server_args.py:204-214 (0.4.3.post4), :224-235 (0.4.6)
    for version in ("0.4.3.post4", "0.4.6"):
        z, d = _sglang(version, "RTX A6000", tp=tp)
        assert d["gpu_memory_utilization"][0] == frac
        assert "server_args.py" in d["gpu_memory_utilization"][1] and version in d["gpu_memory_utilization"][1]


def test_sglang_0_4_6_past_80_gib_reserves_13_gib_and_chunks_by_25000_mib():
    # server_args.py:236-245 (0.4.6): (gpu_mem - 1024 x 13) / gpu_mem with gpu_mem nvidia-smi's MiB (143,771 on H200)
    z, d = _sglang("0.4.6", "H200")
    assert d["gpu_memory_utilization"][0] == round((143771 - 13 * 1024) / 143771, 3)
    assert d["max_num_batched_tokens"][0] == 8192
    _, l4 = _sglang("0.4.6", "L4")
    assert l4["max_num_batched_tokens"][0] == 2048


def test_sglang_0_4_7_and_0_4_8_rules():
    # server_args.py:253-283 (0.4.7): by tp x pp up to 81,920 MiB; past 96 GiB the 48 GiB / 18 GiB rule
    _, d = _sglang("0.4.7", "A100-80GB", tp=2, pp=2)
    assert d["gpu_memory_utilization"][0] == 0.85
    _, h200 = _sglang("0.4.7", "H200")
    assert h200["gpu_memory_utilization"][0] == round(min(0.88 + 48 * 1024 * 0.12 / 143771,
                                                          (143771 - 18 * 1024) / 143771), 3)
    # server_args.py:274-313 (0.4.8): (gpu_mem - reserved) / gpu_mem, reserved 9.5 + tp x pp / 2 GiB under 90 GiB
    z, a6000 = _sglang("0.4.9", "RTX A6000")
    assert "sized as 0.4.8" in z.label
    assert a6000["gpu_memory_utilization"][0] == round((49140 - 10 * 1024) / 49140, 3)


def test_sglang_without_a_version_is_sized_as_the_newest_release_read():
    z = sizing("sglang", None)
    assert "0.5.2" in z.label and z.sglang_rule == "reserved"
    assert "sized as 0.4.3.post4" in sizing("sglang", "0.4.0").label


def test_chunked_local_attention_keeps_chunk_plus_a_step_without_the_extra_block():
    # ChunkedLocalAttentionSpec.max_memory_usage_bytes (vllm/v1/kv_cache_interface.py:232-244, 0.19.1):
    # cdiv(min(attention_chunk_size + max_num_batched_tokens, max_model_len), block_size) blocks
    from triage.plan.plan import vllm_request_bytes

    kvl = layout(model_config.parse({**_phi3_like(), "sliding_window": None, "attention_chunk_size": 8192,
                                     "no_rope_layers": [1, 1, 1, 0] * 8, "max_position_embeddings": 131072},
                                    "chunked.json"), 2)
    assert kvl.window == 8192 and kvl.windowed and kvl.full
    got = vllm_request_bytes(kvl, 65536, 2048, chunked=True)
    assert got == (4096 * kvl.full + 640 * kvl.windowed) * 16       # 65536 / 16 blocks; (8192 + 2048) / 16 blocks


def test_phi3_has_a_gated_mlp_and_phi_2_does_not():
    """vLLM's Phi3ForCausalLM is a Llama (gate, up and down projections); Phi-2's MLP is fc1/fc2."""
    base = {"hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096}
    phi3 = model_config.parse({**base, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}, "phi3.json")
    phi2 = model_config.parse({**base, "model_type": "phi", "architectures": ["PhiForCausalLM"]}, "phi.json")
    assert phi3.gated_mlp and not phi2.gated_mlp


def test_pipeline_stages_and_mla_projections_are_split_as_vllm_splits_them():
    from triage.memory.weights import count, pp_partitions, weights

    assert pp_partitions(61, 2) == [31, 30] and pp_partitions(22, 4) == [5, 6, 6, 5] and pp_partitions(32, 4) == [8] * 4
    mla = model_config.load(ROOT / "samples" / "models" / "DeepSeek-V2-Lite-Chat")
    params = count(mla)
    assert all(r > 0 for r in params.replicated)                # q/kv down-projections to the latent
    one, eight = weights(mla, dtype_bytes=2, quant_bytes=None, quant_text=None, use_index=False), \
        weights(mla, dtype_bytes=2, quant_bytes=None, quant_text=None, tp=8, use_index=False)
    # whole on every GPU: tp 8 holds more than an eighth of tp 1, by 7/8 of the replicated part (and of
    # the rotary table, which every GPU keeps too)
    rotary = (mla.max_position or 0) * mla.rotary_dim * 2 * mla.rotary_tables
    assert eight.per_gpu - one.per_gpu / 8 == pytest.approx((sum(params.replicated) * 2 + rotary) * 7 / 8, rel=0.01)


# --- the profile's sampler ------------------------------------------------------------------------

def test_the_sampler_constants_are_the_bytes_measured_on_a_real_gpu():
    """SAMPLER_BYTES_PER_LOGIT is what benchmarks/measure_sampler_peak.py measured replaying each
    sampler path on an H200 (tests/real_gpu/h200/sampler/), for every shape it tried."""
    import json

    from triage.memory import estimate as e
    rows = [json.loads(line) for line in (ROOT / "tests/real_gpu/h200/sampler/sampler_peak.jsonl").read_text()
            .splitlines() if '"path"' in line]
    assert {r["path"] for r in rows} == {"v0-sort", "v1-sort", "v1-nosort"} and len(rows) == 15
    for r in rows:
        path = "nosort" if r["path"] == "v1-nosort" else "sort"
        assert abs(r["bytes_per_logit"] - e.SAMPLER_BYTES_PER_LOGIT[path]) < 0.5, r


@pytest.mark.parametrize("version, path", [("0.6.4", "sort"), ("0.7.1", "sort"), ("0.10.2", "sort"),
                                           ("0.15.0", "sort"), ("0.16.9", "sort"), ("0.17.0", "nosort"),
                                           ("0.20.2", "nosort"), ("0.33.0", "nosort")])
def test_each_release_samples_as_its_source_says(version, path):
    assert sizing("vllm", version).sampler == path
    assert "topk_topp" in sizing("vllm", version).sources["sampler"] or "sampler.py" in \
        sizing("vllm", version).sources["sampler"]


def _llama8_on_h100(version: str, **flags):
    shape = model_config.load(str(MODELS / "Llama-3.1-8B-Instruct"))
    return evaluate(shape, resolve("H100"), Request(max_model_len=32768, **flags), sizing("vllm", version))


def test_a_sorting_sampler_over_1024_rows_costs_the_kv_cache_what_it_allocates():
    """vLLM 0.10.2 on an H100 profiles 1,024 rows x 128,256 logits: a full sort of them (38 bytes a
    logit, about 4.6 GiB) is the profile's peak, and the KV cache is that much smaller than where
    the engine samples with FlashInfer (14 bytes a logit)."""
    sorted_ = _llama8_on_h100("0.10.2")
    flash = _llama8_on_h100("0.10.2", flashinfer_sampler=True)
    rows, vocab = 1024, 128_256
    assert sorted_.figures["profile_peak"].value >= rows * vocab * 38
    assert "a full sort" in sorted_.figures["profile_peak"].basis
    assert "no sort" in flash.figures["profile_peak"].basis
    saved = sorted_.figures["profile_peak"].value - flash.figures["profile_peak"].value
    assert saved == pytest.approx(rows * vocab * (38 - 14), rel=0.01)
    assert flash.pool - sorted_.pool == pytest.approx(saved, rel=0.01)


def test_the_profile_peak_is_the_larger_of_forward_pass_and_sampler_not_their_sum():
    from triage.memory import estimate as e
    shape = model_config.load(str(MODELS / "Llama-3.1-8B-Instruct"))
    fwd = e.forward_peak(shape, 8192, 1, 2)
    smp = e.sampler_peak(shape, 1, "sort")          # one row: the forward pass dominates
    assert e.profile_peak(shape, 8192, 1, 1, 2, "sort").bytes == fwd.bytes
    big = e.profile_peak(shape, 8192, 1024, 1, 2, "sort")
    assert big.bytes == 8192 * shape.hidden * 2 + 1024 * shape.vocab * 38 and big.bytes < fwd.bytes + \
        e.sampler_peak(shape, 1024, "sort").bytes + 8192 * shape.hidden * 2
    assert smp.bytes < fwd.bytes


def test_sglang_takes_its_fraction_of_the_memory_free_after_context_and_distributed_init():
    """SGLang (model_runner.py profile_max_num_token): rest = free after load - free at init x
    (1 - mem_fraction_static), so the pool is mem_fraction_static x (what was free at init) less
    the weights; nothing else of the profile comes off it."""
    from triage.memory import estimate as e
    shape = model_config.load(str(MODELS / "Llama-3.1-8B-Instruct"))
    gpu = resolve("L40S")
    for tp in (1, 2):
        o = evaluate(shape, gpu, Request(tp=tp, util=0.85, max_model_len=8192), sizing("sglang", "0.4.3.post4"))
        held = e.CUDA_CONTEXT + (e.NCCL_SETUP if tp > 1 else 0)
        assert o.figures["budget"].value == int(0.85 * (gpu.memory - held))
        assert o.pool == o.figures["budget"].value - o.figures["weights_per_gpu"].value


def _qwen2_vl_on_16gib(version: str):
    shape = model_config.load(str(ROOT / "tests/plan_validation/models/Qwen2-VL-2B-Instruct/config.json"))
    gpu = resolve(str(int(15.99 * (1 << 30))))
    req = Request(max_model_len=4096, util=0.8, enforce_eager=True)
    return shape, evaluate(shape, gpu, req, sizing("vllm", version))


def test_a_qwen_vl_tower_rotating_in_fp32_peaks_in_its_attention_with_the_fp32_pixels_held():
    """vLLM 0.10.2 rotates a Qwen2-VL tower's q and k one at a time through fp32 copies
    (qwen2_vl.py:275-284) while the qkv output and contiguous q, k, v are alive: 12 x the tower's
    width a patch, over the MLP's 2 x 5,120 + 2 x 1,280; the processor's fp32 pixels stay on the
    GPU. From 0.15.0 the rotation runs in the activation dtype and the MLP is the larger again.
    A real 0.10.2 start-up (tests/plan_validation/...-rtx4080-eager.yaml) printed 2.36 GiB for
    the peak and 6.27 GiB for the KV cache."""
    shape, old = _qwen2_vl_on_16gib("0.10.2")
    v = shape.vision
    assert (v.patches_per_item, v.hidden, v.pixel_bytes_per_patch) == (65_536, 1_280, 4 * 3 * 2 * 14 * 14)
    encoder = 65_536 * 12 * 1_280 * 2 + 65_536 * v.pixel_bytes_per_patch + 16_384 * shape.hidden * 2
    assert old.figures["profile_peak"].value == encoder
    assert "rotated fp32" in old.figures["profile_peak"].basis
    case = yaml.safe_load((ROOT / "tests/plan_validation/vllm-file-imageworks-qwen2-vl-2b-instruct-rtx4080-eager.yaml")
                          .read_text())
    printed = {p["quantity"]: p["value"] for p in case["printed"]}
    assert old.figures["profile_peak"].value / (1 << 30) == pytest.approx(printed["activation_peak_gib"], rel=0.10)
    assert old.pool / (1 << 30) == pytest.approx(printed["kv_cache_gib"], rel=0.10)
    _, new = _qwen2_vl_on_16gib("0.33.0")
    assert "MLP" in new.figures["profile_peak"].basis and new.figures["profile_peak"].value < encoder
    assert new.pool > old.pool


def test_every_release_says_how_a_vision_tower_rotates_with_its_source():
    for rel in releases():
        assert rel.vision_rotary.value in ("fp32", "fp32-concat", "native") and rel.vision_rotary.source, rel.version

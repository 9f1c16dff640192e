"""What vLLM's profiling run allocates to sample from its logits, measured on a real GPU.

vLLM sizes the KV cache from the peak of one profiling run, and the sampler's pass over
`rows x vocabulary` logits is part of that peak. This script replays, with torch on a CUDA device,
the tensor operations each sampler path performs (read in the release's own wheel, cited below),
and prints the peak memory they add per logit, beside the count of tensors alive at once that the
plan's constants (triage/data/vllm_releases.yaml `sampler`) are derived from:

  v0-sort      vllm/model_executor/layers/sampler.py (0.6.4): bf16 logits kept by the caller,
               .to(float), temperature, _apply_top_k_top_p (sort, masks, softmax, cumsum,
               empty_like().scatter_), softmax, log_softmax, exponential sampling
  v1-sort      vllm/v1/sample/ops/topk_topp_sampler.py (0.10.1.1) apply_top_k_top_p: sort, masks,
               softmax, cumsum(out=), scatter; softmax; random_sample
  v1-nosort    the Triton (0.19.1 topk_topp_triton.py, in place) and FlashInfer paths: no sort;
               the float copy, the probabilities and the exponential draw

    python benchmarks/measure_sampler_peak.py            # needs torch with CUDA

Prints one JSON object a line.
"""
from __future__ import annotations

import json
import sys


def _sorted_top_k(torch, half, temperature: float, top_p: float):
    """The float copy, temperature, the full sort and the top-k mask both sort paths begin with;
    every tensor is returned so that it stays alive as long as in the engine's function."""
    logits = half.to(torch.float32)
    logits.div_(temperature)
    p = torch.full((logits.shape[0],), top_p, device=logits.device)
    k = torch.full((logits.shape[0],), logits.shape[1] - 1, device=logits.device)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    top_k_mask = logits_sort.size(1) - k.to(torch.long)
    top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
    top_k_mask = logits_sort < top_k_mask
    logits_sort.masked_fill_(top_k_mask, -float("inf"))
    return logits, p, logits_sort, logits_idx, top_k_mask


def _v0_sort(torch, half):
    logits, p, logits_sort, logits_idx, top_k_mask = _sorted_top_k(torch, half, 1.0, 0.99)
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = probs_sort.cumsum(dim=-1)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    masked = torch.empty_like(logits_sort).scatter_(dim=-1, index=logits_idx, src=logits_sort)
    del logits, logits_sort, logits_idx, top_k_mask, probs_sort, probs_sum, top_p_mask
    probs = torch.softmax(masked, dim=-1, dtype=torch.float)
    logprobs = torch.log_softmax(masked, dim=-1, dtype=torch.float)
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=1), logprobs


def _v1_sort(torch, half):
    logits, p, logits_sort, logits_idx, top_k_mask = _sorted_top_k(torch, half, 0.5, 0.9)
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    masked = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    del logits, logits_sort, logits_idx, top_k_mask, probs_sort, probs_sum, top_p_mask
    probs = masked.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs)
    q.exponential_()
    return probs.div_(q).argmax(dim=-1)


def _v1_nosort(torch, half):
    logits = half.to(torch.float32)
    logits.div_(0.5)
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs)
    q.exponential_()
    return probs.div_(q).argmax(dim=-1)


PATHS = {"v0-sort": _v0_sort, "v1-sort": _v1_sort, "v1-nosort": _v1_nosort}


def measure(torch, path: str, rows: int, vocab: int) -> dict:
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    half = torch.randn(rows, vocab, dtype=torch.bfloat16, device=dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = PATHS[path](torch, half)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base + half.numel() * half.element_size()
    del out, half
    return {"path": path, "rows": rows, "vocab": vocab, "peak_bytes": peak,
            "bytes_per_logit": round(peak / (rows * vocab), 2)}


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("measure_sampler_peak: needs torch with CUDA", file=sys.stderr)
        return 1
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                      "device": torch.cuda.get_device_name(0)}))
    for path in PATHS:
        for rows, vocab in ((256, 32000), (256, 128256), (1024, 151936), (512, 102400), (256, 50272)):
            print(json.dumps(measure(torch, path, rows, vocab)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

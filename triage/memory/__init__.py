"""The memory arithmetic of an LLM server, shared by the classifier's advice (triage/fit.py) and
`triage plan`: bytes per parameter and per KV element (precision), a model's shape read from its
Hugging Face config.json (config), its weights (weights) and its KV cache per token, per block and
per sequence (kv), and the estimates of what a start-up profile takes beside them (estimate).

Only the standard library is imported here, so `triage classify` stays cold.
"""

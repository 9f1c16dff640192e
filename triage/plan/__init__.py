"""`triage plan`: before a deploy, will this model with these flags run out of GPU memory?

plan.py works the verdict out (with the shared arithmetic of triage/memory), engines.py holds how
vLLM and SGLang size their memory at start-up, gpus.py the GPU table (triage/data/gpus.yaml),
render.py the text and `triage.plan/v1` JSON, cli.py the command. Nothing here is imported by
`triage classify`.
"""

"""Recovery: runbooks, the executor and its audit trail."""

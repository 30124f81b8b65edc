"""``python -m bench.pd``: colocated against disaggregated prefill/decode on real vLLM engines of the tiny model."""

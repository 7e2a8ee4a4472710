"""The LLM view in Locust's web UI: live TTFT / ITL / TPOT / E2E, tokens/s, errors, stage, server gauges and the
SLA's provisional status, from the records that reach the master. `live` is the pure aggregator; `routes` wires it
into Locust (`install()`)."""

from slabench.webui.routes import install

__all__ = ["install"]

"""The Locust bridge: options, the LLM user, the record hub and its parts (spool, shipping, intake, watches), the
open-loop dispatcher and the SLA hook. The only layer that runs inside Locust's processes."""

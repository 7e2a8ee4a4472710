"""Fleet planning without GPUs: `slabench plan` (replay a load through the simulator's vLLM model of each GPU,
N replicas behind a load balancer, in virtual time; the fewest replicas meeting the SLA's latency checks, and their
cost) and `slabench calibrate` (fit that model to a real server from a sweep). See docs/plan.md."""

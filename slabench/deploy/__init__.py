"""The EKS platform tooling: `slabench deploy` (cli, plan, flow, helm, kube, results) and the offline manifest
validator (`python -m slabench.deploy.validate`, CRD schemas in schemas/)."""

"""Two-tier model weight cache: Hugging Face once → S3 durably (`publish`) → host NVMe fast (`hydrate`).

Modules: `s3` (URLs, client, error messages), `manifest` (what a published revision holds), `source` (local snapshot
layouts), `local` (the host cache's lock, journal and completion marker), `publish`, `hydrate`, `status`, `cli`.
Nothing here imports boto3 at import time: a hydrate that finds its cache complete never needs it.
"""

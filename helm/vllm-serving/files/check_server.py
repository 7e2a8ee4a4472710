"""`helm test` check: the server answers /health with 200 and serves the expected model name on /v1/models.

Runs in the suite image with only the standard library. Reads SERVER_URL, SERVED_MODEL_NAME and, if the server
requires a key, VLLM_API_KEY (from the same Kubernetes Secret as the server). Exit 0 = pass, 1 = fail.
"""

import json
import os
import sys
import urllib.error
import urllib.request


def get(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check(base: str, model: str, api_key: str | None, timeout: float = 10.0) -> list[str]:
    """Return the problems found (empty when the server is healthy and serves `model`)."""
    problems = []
    try:
        status, _ = get(f"{base}/health", {}, timeout)
        if status != 200:
            problems.append(f"GET {base}/health returned {status}, expected 200")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        status, body = get(f"{base}/v1/models", headers, timeout)
        if status != 200:
            problems.append(f"GET {base}/v1/models returned {status}, expected 200")
        else:
            ids = [m.get("id") for m in json.loads(body).get("data", [])]
            if model not in ids:
                problems.append(f"/v1/models lists {ids}, expected {model!r} (check --served-model-name)")
    except (OSError, ValueError) as e:
        problems.append(f"cannot reach {base}: {e}")
    return problems


def main() -> int:
    base = os.environ["SERVER_URL"].rstrip("/")
    problems = check(base, os.environ["SERVED_MODEL_NAME"], os.environ.get("VLLM_API_KEY") or None)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    if not problems:
        print(f"OK: {base} is healthy and serves {os.environ['SERVED_MODEL_NAME']!r}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""`helm test` check: every URL given as an argument answers GET with HTTP 200.

Standard library only (runs in the suite image). Exit 0 = all answered 200, 1 = any did not.
"""

import sys
import urllib.error
import urllib.request


def status_of(url: str, timeout: float = 10.0) -> int | str:
    """The HTTP status of GET `url`, or the connection error as text."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return f"unreachable ({e})"


def main(urls: list[str]) -> int:
    if not urls:
        print("usage: check_http.py URL [URL...]", file=sys.stderr)
        return 1
    failed = 0
    for url in urls:
        status = status_of(url)
        ok = status == 200
        failed += not ok
        print(f"{'OK' if ok else 'FAIL'}: GET {url} -> {status}", file=sys.stdout if ok else sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

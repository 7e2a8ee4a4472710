"""One free-port helper for every test server and Locust master: bind port 0 and return what the kernel chose, so
two suites on one machine never collide (and no test relies on Locust's default master port)."""

import socket


def free_port() -> str:
    """A TCP port free on 127.0.0.1 now, as the string a command line wants."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])

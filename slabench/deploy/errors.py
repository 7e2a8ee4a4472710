"""Deploy failures that are not the user's input: the platform produced no verdict."""

from slabench.core.errors import ExitCode, UserError


class DeployFailed(UserError):
    """Helm, the cluster or a timeout stopped the run before the Locust Job gave its verdict (one line, exit 5)."""

    exit_code = ExitCode.PLATFORM

"""Helm through pyhelm3: render, install/upgrade, uninstall. One place that knows the helm command lines."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from slabench.core.errors import UserError
from slabench.core.extras import require
from slabench.deploy.errors import DeployFailed
from slabench.deploy.plan import Values

T = TypeVar("T")


class Helm:
    def __init__(
        self,
        executable: str = "helm",
        kubeconfig: Path | None = None,
        kubecontext: str | None = None,
        timeout: str = "10m",
    ) -> None:
        require("pyhelm3", "running helm")
        from pyhelm3 import Client, Command

        path = shutil.which(executable) or (executable if Path(executable).is_file() else None)
        if path is None:
            raise UserError(f"--helm: {executable!r} not found — install helm 3.17+/4, or run .ci/get-helm")
        self._command = Command(
            executable=path, kubeconfig=kubeconfig, kubecontext=kubecontext, default_timeout=timeout
        )
        self._client = Client(self._command, executable=path)

    @property
    def version(self) -> str:
        return str(self._client.version)

    def _run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        from pyhelm3 import errors

        try:
            return asyncio.run(coro)
        except errors.Error as e:
            detail = e.stderr.decode(errors="replace").strip().splitlines() if e.stderr else []
            raise DeployFailed(f"helm {what} failed: {detail[-1] if detail else e}") from None

    def template(self, release: str, chart: Path, values: Values, namespace: str) -> str:
        """`helm template` output, byte for byte (the values go in on stdin, as with install)."""
        cmd = ["template", release, str(chart), "--namespace", namespace, "--values", "-"]
        out: bytes = self._run(self._command.run(cmd, json.dumps(values).encode()), f"template {release}")
        return out.decode()

    def upgrade_install(self, release: str, chart: Path, values: Values, namespace: str) -> None:
        async def go() -> None:
            loaded = await self._client.get_chart(chart)
            # No --wait: readiness is watched by the deploy itself, with progress and its own timeout.
            await self._client.install_or_upgrade_release(
                release, loaded, values, namespace=namespace, create_namespace=False
            )

        self._run(go(), f"upgrade --install {release}")

    def uninstall(self, release: str, namespace: str) -> None:
        """Remove a release; a release that does not exist is already removed."""
        self._run(self._client.uninstall_release(release, namespace=namespace), f"uninstall {release}")

"""Kubeconfig files for the sandbox's clusters.

The sandbox serves plain HTTP on loopback with no authentication, so a kubeconfig needs only a cluster entry
with the server URL, an empty user and a context tying them together. Both kubectl (``--kubeconfig``) and
kubernetes-asyncio (``config.load_kube_config(config_file=...)``) accept that. Files are written atomically
(temporary file + rename) so a client polling for the file never reads half of it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml


def kubeconfig_dict(server_url: str, context: str) -> dict[str, Any]:
    """The kubeconfig document for one cluster; ``context`` names the cluster, user and context alike."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}
        ],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike[str], server_url: str, context: str) -> Path:
    """Write a kubeconfig for ``server_url`` to ``path`` (parents created, replaced atomically); its path."""
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(server_url, context), sort_keys=False)
    fd, tmp = tempfile.mkstemp(prefix=".kubeconfig-", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target

"""The workspace PersistentVolumeClaim: code/, output/, models/, data/ of one run."""

from __future__ import annotations

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import COMPONENT_AGENT
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import Body, Manifest, object_meta, workspace_name


def workspace_pvc(body: Body, config: OperatorConfig, run_spec: BenchRunSpec | None = None) -> Manifest:
    """`spec.resources.workspaceSize`, else the operator's `--workspace-size`."""
    size = (run_spec.resources.workspace_size if run_spec is not None else None) or config.workspace_size
    spec: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if config.storage_class is not None:
        spec["storageClassName"] = config.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(body, workspace_name(body), COMPONENT_AGENT),
        "spec": spec,
    }

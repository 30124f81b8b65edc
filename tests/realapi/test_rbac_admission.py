"""Why the chart grants `update` on ascendinferences/finalizers: the real API server's
OwnerReferencesPermissionEnforcement admission plugin refuses a child with blockOwnerDeletion otherwise."""

from __future__ import annotations

import uuid

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import Kube, KubeError
from tests.support.corpus import cr

pytestmark = pytest.mark.e2e


def service_account_client(real_cluster, namespace: str, rules: list[dict]) -> Kube:
    """A client authenticated as a fresh ServiceAccount holding exactly ``rules`` in ``namespace``."""
    admin = real_cluster.kube
    name = f"sa-{uuid.uuid4().hex[:6]}"
    metadata = {"name": name, "namespace": namespace}
    admin.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}, exist_ok=False)
    admin.create(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata, "rules": rules},
        exist_ok=False,
    )
    admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
        exist_ok=False,
    )
    token = admin.request_token(namespace, name, 3600)
    path = real_cluster.kubeconfig.parent / f"{name}.kubeconfig"
    real_cluster.cluster.write_kubeconfig(path, token=token)
    return Kube.connect(str(path))


SERVICES = {"apiGroups": [""], "resources": ["services"], "verbs": ["create"]}
FINALIZERS = {"apiGroups": [names.GROUP], "resources": ["ascendinferences/finalizers"], "verbs": ["update"]}


def test_block_owner_deletion_needs_update_on_the_finalizers(real_cluster):
    admin = real_cluster.kube
    namespace = f"rbac-{uuid.uuid4().hex[:6]}"
    admin.create_namespace(namespace)
    try:
        owner = admin.create(
            {**cr(name="owner"), "metadata": {"name": "owner", "namespace": namespace}}, exist_ok=False
        )
        assert owner is not None

        def child(name: str) -> dict:
            return {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "ownerReferences": [
                        {
                            "apiVersion": names.API_VERSION,
                            "kind": names.KIND,
                            "name": "owner",
                            "uid": owner["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"ports": [{"port": 80}]},
            }

        without = service_account_client(real_cluster, namespace, [SERVICES])
        with pytest.raises(KubeError) as refused:
            without.create(child("refused"), exist_ok=False)
        assert refused.value.status == 403 and "blockOwnerDeletion" in str(refused.value), refused.value

        granted = service_account_client(real_cluster, namespace, [SERVICES, FINALIZERS])
        created = granted.create(child("created"), exist_ok=False)
        assert created is not None
        assert created["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True
    finally:
        admin.delete_namespace(namespace)

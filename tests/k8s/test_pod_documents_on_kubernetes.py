"""Pod documents judged by a real kube-apiserver (dry run) and by `parse_pod`: the cases of
tests/pools/pod_document_cases.py (quantities, tolerations, node affinity with fields and
preferred terms, containers, annotations) are taken or refused by both, and where both refuse,
every field the API server names is one the product names (or an object holding it)."""

from __future__ import annotations

import json
import re

import pytest

from pools.core.errors import ValidationError
from pools.core.podspec import parse_pod
from tests.pools.pod_document_cases import CASES, case_document


def refused_by_kubernetes(kube, namespace: str, document: dict) -> set[str] | None:
    """The fields kube-apiserver names when it refuses the document (none when it cannot decode
    it: a malformed quantity is a 400); None when it takes it."""
    method, url, headers, body, _ = kube.param_serialize(
        "POST", "/api/v1/namespaces/{namespace}/pods", path_params={"namespace": namespace}, query_params=[("dryRun", "All")],
        header_params={"Content-Type": "application/json", "Accept": "application/json"}, body=document, auth_settings=["BearerToken"],
    )  # fmt: skip  (raw JSON: the client's own models would refuse some cases before the server sees them)
    response = kube.call_api(method, url, header_params=headers, body=body)
    response.read()
    if response.status < 300:
        return None
    assert response.status in (400, 422), response.data
    causes = (json.loads(response.data).get("details") or {}).get("causes") or ()
    return {re.sub(r"\[([^\]0-9][^\]]*)\]", r".\1", cause["field"]) for cause in causes if cause.get("field")}


def refused_by_us(document: dict) -> set[str] | None:
    try:
        parse_pod(document, default_namespace="algorithm")
    except ValidationError as exc:
        return {error.field for error in exc.errors}
    return None


def _holder(field: str) -> str:
    """The object a field belongs to, up to its last list index (`spec.tolerations[0]`): where
    kube-apiserver names a sibling of ours (a toleration's value error under `.operator`)."""
    return field[: field.rindex("]") + 1] if "]" in field else field


@pytest.mark.parametrize(("case", "change", "refused"), CASES, ids=[case for case, _, _ in CASES])
def test_we_judge_each_pod_as_kube_apiserver_does(kube, namespace, case, change, refused):
    document = case_document(change)
    theirs, ours = refused_by_kubernetes(kube, namespace, document), refused_by_us(document)
    assert (theirs is not None) == refused, (case, theirs)
    assert (ours is not None) == refused, (case, ours)
    for field in theirs or ():
        assert any(mine == field or mine.startswith(field + ".") or _holder(mine) == _holder(field) for mine in ours), (case, field, ours)

"""Pod documents on which the product must judge as kube-apiserver v1.37 judges: each case
changes one thing in a valid pod and says whether the API server refuses it. tests/pools checks
`parse_pod` against the expectation; tests/k8s sends every case to a real kube-apiserver (dry
run) and checks the expectation itself, and that both name the same fields. Cases the product
refuses on purpose (resources no node has, shares of a GPU) are not here: there it differs."""

from __future__ import annotations

import copy
from collections.abc import Callable

BASE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "probe", "labels": {"project": "nlp"}},
    "spec": {"containers": [{"name": "main", "image": "registry.local/train:1",
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}}]},
}  # fmt: skip


def _container(**fields) -> Callable[[dict], None]:
    return lambda d: d["spec"]["containers"][0].update(fields)


def _requests(**quantities) -> Callable[[dict], None]:
    return lambda d: d["spec"]["containers"][0]["resources"]["requests"].update(quantities)


def _limits(**quantities) -> Callable[[dict], None]:
    return lambda d: d["spec"]["containers"][0]["resources"]["limits"].update(quantities)


def _gpus(value) -> Callable[[dict], None]:
    return lambda d: d["spec"]["containers"][0]["resources"].update(limits={"nvidia.com/gpu": value})


def _spec(**fields) -> Callable[[dict], None]:
    return lambda d: d["spec"].update(fields)


def _both(first, second) -> Callable[[dict], None]:
    return lambda d: (first(d), second(d))


def _required(*terms) -> Callable[[dict], None]:
    return _spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}})


def _preferred(*items) -> Callable[[dict], None]:
    return _spec(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": list(items)}})


def _second_container(**fields) -> Callable[[dict], None]:
    return lambda d: d["spec"]["containers"].append({"name": "side", "image": "side:1", **fields})


# (case, change, refused by kube-apiserver)
CASES: list[tuple[str, Callable[[dict], None], bool]] = [
    ("cpu .5", _requests(cpu=".5"), False),
    ("cpu 1e3", _requests(cpu="1e3"), False),
    ("cpu +1", _requests(cpu="+1"), False),
    ("cpu 100u", _requests(cpu="100u"), False),
    ("cpu 2E0", _requests(cpu="2E0"), False),
    ("cpu 1.", _requests(cpu="1."), False),
    ("cpu 1.2.3", _requests(cpu="1.2.3"), True),
    ("cpu with a space", _requests(cpu="1 k"), True),
    ("cpu 1K", _requests(cpu="1K"), True),
    ("cpu negative", _requests(cpu="-1"), True),
    ("memory 5e9", _requests(memory="5e9"), False),
    ("memory +1Gi", _requests(memory="+1Gi"), False),
    ("memory 100m", _requests(memory="100m"), False),
    ("ephemeral-storage", _requests(**{"ephemeral-storage": "10Gi"}), False),
    ("gpus 1e0", _gpus("1e0"), False),
    ("gpus 2000m", _gpus("2000m"), False),
    ("gpus +1", _gpus("+1"), False),
    ("gpus 1500m", _gpus("1500m"), True),
    ("gpus 1.5", _gpus("1.5"), True),
    ("gpu request without limit", lambda d: d["spec"]["containers"][0]["resources"].update(requests={"nvidia.com/gpu": 1}, limits={}), True),
    ("memory request above its limit by a byte", _both(_requests(memory="1000001"), _limits(memory="1000000")), True),
    ("cpu request above its limit below a milli (both round up to 2m)", _both(_requests(cpu="0.0015"), _limits(cpu="0.0011")), False),
    ("cpu request above its limit by a milli", _both(_requests(cpu="0.0021"), _limits(cpu="0.0011")), True),
    ("gpus a hair below one (rounds up to 1)", _gpus("0.9999"), False),
    ("cpu request equal to its limit", _both(_requests(cpu="500m"), _limits(cpu="0.5")), False),
    ("toleration of everything", _spec(tolerations=[{"operator": "Exists"}]), False),
    ("toleration seconds with NoExecute", _spec(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]), False),
    ("toleration seconds with NoSchedule", _spec(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 300}]), True),
    ("toleration key not a label key", _spec(tolerations=[{"key": "bad key!", "operator": "Exists"}]), True),
    ("toleration value not a label value", _spec(tolerations=[{"key": "k", "value": "not a value!", "effect": "NoSchedule"}]), True),
    ("toleration operator unknown", _spec(tolerations=[{"key": "k", "operator": "Maybe"}]), True),
    ("toleration value with Exists", _spec(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]), True),
    ("toleration with an empty key and Equal", _spec(tolerations=[{"value": "v"}]), True),
    ("toleration effect unknown", _spec(tolerations=[{"key": "k", "operator": "Exists", "effect": "Sometimes"}]), True),
    ("node name field", _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}), False),
    ("node name field NotIn", _required({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}]}), False),
    ("field of another key", _required({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}), True),
    ("node name field with two names", _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}), True),
    ("node name field with Exists", _required({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}), True),
    ("an empty term", _required({}), False),
    ("no terms", _required(), True),
    ("Gt with a word", _required({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["abc"]}]}), False),
    ("Gt with two values", _required({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["1", "2"]}]}), True),
    ("In with no label value", _required({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["not valid!"]}]}), True),
    ("In with no values", _required({"matchExpressions": [{"key": "pool", "operator": "In", "values": []}]}), True),
    ("Exists with values", _required({"matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["a"]}]}), True),
    ("operator unknown", _required({"matchExpressions": [{"key": "pool", "operator": "Like", "values": ["a"]}]}), True),
    ("key null", _required({"matchExpressions": [{"key": None, "operator": "In", "values": ["x"]}]}), True),
    ("operator null", _required({"matchExpressions": [{"key": "pool", "operator": None, "values": ["x"]}]}), True),
    ("field operator null", _required({"matchFields": [{"key": "metadata.name", "operator": None, "values": ["node-1"]}]}), True),
    ("preferred operator null", _preferred({"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": None, "values": ["b"]}]}}), True),
    ("preferred term", _preferred({"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}), False),
    ("preferred weight 0", _preferred({"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}), True),
    ("preferred weight 101", _preferred({"weight": 101, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}), True),
    ("preferred operator unknown", _preferred({"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "Bogus"}]}}), True),
    ("annotation key in capitals", lambda d: d["metadata"].update(annotations={"Example.COM/Foo": "x"}), False),
    ("annotations over 256 KiB", lambda d: d["metadata"].update(annotations={"a": "x" * 150_000, "b": "y" * 150_000}), True),
    ("container name with capitals", _container(name="Main_1"), True),
    ("container without an image", lambda d: d["spec"]["containers"][0].pop("image"), True),
    ("image with a trailing blank", _container(image="registry.local/train:1 "), True),
    ("two containers of one name", _second_container(name="main"), True),
    ("a second container", _second_container(), False),
    ("restart policy unknown", _spec(restartPolicy="Sometimes"), True),
    ("restart policy Never", _spec(restartPolicy="Never"), False),
    ("environment", _container(env=[{"name": "MODEL.PATH", "value": "/m"}]), False),
    ("environment name with =", _container(env=[{"name": "A=B", "value": "x"}]), True),
    ("port", _container(ports=[{"containerPort": 8080, "protocol": "TCP"}]), False),
    ("port 0", _container(ports=[{"containerPort": 0}]), True),
    ("name ending in a newline", lambda d: d["metadata"].update(name="probe\n"), True),
    ("label ending in a newline", lambda d: d["metadata"].update(labels={"team": "a\n"}), True),
]


def case_document(change: Callable[[dict], None]) -> dict:
    document = copy.deepcopy(BASE)
    change(document)
    return document

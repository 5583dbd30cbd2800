"""The GpuNodePool document (seed O2, O4): loading, strict validation with field paths, round trips."""

from __future__ import annotations

import copy
from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.documents import dump_yaml, load_yaml, merge_patch, split_server_fields, to_document
from pools.core.durations import format_duration, parse_duration
from pools.core.errors import ValidationError
from pools.core.spec import (
    POOL_SCALING_DEFAULTS,
    Budget,
    Burst,
    Catalog,
    PoolSpec,
    Taint,
    effective_node_labels,
    parse_document,
    spec_autoscales,
)
from tests.conftest import EXAMPLES

CATALOG = Catalog(
    gpu_models=frozenset({"A100_80G", "H100_80G", "L40S", "T4"}),
    node_types={"GPU_1_CARD": 1, "GPU_2_CARD": 2, "GPU_4_CARD": 4, "GPU_8_CARD": 8},
    zones={"cn-east-2a": "cn-east-2", "cn-east-2b": "cn-east-2", "cn-north-1a": "cn-north-1"},
    max_nodes=100,
)


def article() -> dict:
    return load_yaml((EXAMPLES / "create-train-pool.yaml").read_text())


def errors_of(document, catalog: Catalog = CATALOG) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        parse_document(document, catalog)
    return {e.field: e.message for e in caught.value.errors}


def test_the_articles_train_pool_loads_verbatim():
    spec = parse_document(article(), CATALOG)
    assert spec.name == "train-pool-a"
    assert spec.labels == {"pool-role": "training", "team": "algorithm"}
    assert (spec.node_type, spec.gpu_model, spec.min_nodes, spec.max_nodes) == ("GPU_8_CARD", "A100_80G", 2, 6)
    assert (spec.region, spec.lease_type, spec.system_image) == ("cn-east-2a", "monthly", "ubuntu-22.04-cuda-12.2")
    assert spec.auto_repair is True and spec.preemptible is False
    assert spec.node_labels == {"gpu-class": "a100"}
    assert spec.node_taints == (Taint("pool", "train", "NoSchedule"),)


def test_the_articles_scaling_block_loads_with_its_numbers():
    """O4: gpu-memory 85%, queued_pods 10, scale-down window 30m, 1 pod per 120 s."""
    spec = parse_document(load_yaml((EXAMPLES / "train-pool-with-scaling.yaml").read_text()), CATALOG)
    metrics = {m.name: (m.type, m.target) for m in spec.scaling.metrics}
    assert metrics == {"gpu-memory": ("Resource", 85.0), "queued_pods": ("Pods", 10.0)}
    assert spec.scaling.scale_down.stabilization_window_seconds == 1800
    assert [(p.type, p.value, p.period_seconds) for p in spec.scaling.scale_down.policies] == [("Pods", 1, 120)]
    assert spec.scaling.scale_up == POOL_SCALING_DEFAULTS.scale_up
    assert spec.autoscaling == spec.scaling  # the block as written autoscales: no other field needed


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml") if "kind: GpuNodePool" in p.read_text()))
def test_every_example_round_trips_load_dump_load(example):
    document = load_yaml((EXAMPLES / example).read_text())
    again = load_yaml(dump_yaml(document))
    assert again == document
    assert parse_document(again, CATALOG) == parse_document(document, CATALOG)


def test_to_document_of_the_article_parses_back_to_the_same_spec():
    spec = parse_document(load_yaml((EXAMPLES / "train-pool-with-scaling.yaml").read_text()), CATALOG)
    assert parse_document(load_yaml(dump_yaml(to_document(spec))), CATALOG) == spec


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [
        (lambda d: d["metadata"].update(name="Train_Pool"), "metadata.name", "DNS-1123"),
        (lambda d: d["metadata"].update(name="a" * 64), "metadata.name", "DNS-1123"),
        (lambda d: d["metadata"].update(name="new"), "metadata.name", "reserved"),
        (lambda d: d["spec"]["nodeCount"].update(min=-1), "spec.nodeCount.min", "at least 0"),
        (lambda d: d["spec"]["nodeCount"].update(min=7), "spec.nodeCount.min", "must not exceed spec.nodeCount.max"),
        (lambda d: d["spec"]["nodeCount"].update(max=101), "spec.nodeCount.max", "at most 100"),
        (lambda d: d["spec"]["nodeCount"].update(min="2"), "spec.nodeCount.min", "integer"),
        (lambda d: d["spec"].update(gpuModel="A100_40G"), "spec.gpuModel", "unknown GPU model"),
        (lambda d: d["spec"].update(nodeType="GPU_16_CARD"), "spec.nodeType", "unknown node type"),
        (lambda d: d["spec"].update(leaseType="weekly"), "spec.leaseType", "unknown lease type"),
        (lambda d: d["spec"].update(region="mars-1a"), "spec.region", "unknown zone"),
        (lambda d: d["spec"]["nodeTaints"][0].update(effect="NoEntry"), "spec.nodeTaints[0].effect", "NoSchedule, PreferNoSchedule, NoExecute"),
        (lambda d: d["spec"]["nodeLabels"].update({"-bad": "x"}), "spec.nodeLabels.-bad", "invalid label key"),
        (lambda d: d["spec"]["nodeLabels"].update({"ok": "no spaces"}), "spec.nodeLabels.ok", "invalid label value"),
        (lambda d: d["metadata"]["labels"].update({"Example.COM/x": "y"}), "metadata.labels.Example.COM/x", "prefix"),
        (lambda d: d["metadata"]["labels"].update({"team": "a" * 64}), "metadata.labels.team", "at most 63"),
        (lambda d: d["metadata"]["labels"].update({"on": True}), "metadata.labels.on", "quote"),
        (lambda d: d["spec"].update(nodeCountt={"min": 1}), "spec.nodeCountt", "unknown field"),
        (lambda d: d["metadata"].update(namespace="default"), "metadata.namespace", "unknown field"),
        (lambda d: d.update(extra=1), "extra", "unknown field"),
        (lambda d: d.update(apiVersion="v1"), "apiVersion", "ebcloud.io/v1"),
        (lambda d: d.update(kind="NodePool"), "kind", "GpuNodePool"),
        (lambda d: d["spec"].pop("gpuModel"), "spec.gpuModel", "required"),
        (lambda d: d["spec"].update(autoRepair="yes"), "spec.autoRepair", "true or false"),
        (lambda d: d["spec"].update(scaling={"scaleDown": {"stabilizationWindow": "30 minutes"}}), "spec.scaling.scaleDown.stabilizationWindow", "not a duration"),
        (lambda d: d["spec"].update(scaling={"scaleDown": {"stabilizationWindow": "2h"}}), "spec.scaling.scaleDown.stabilizationWindow", "1h"),
        (lambda d: d["spec"].update(scaling={"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}}), "spec.scaling.scaleUp.policies[0].periodSeconds", "at most 1800"),
        (lambda d: d["spec"].update(scaling={"default": {"metrics": [{"type": "Pods", "pods": "queued_pods", "targt": 3}]}}), "spec.scaling.default.metrics[0].targt", "unknown field"),
        # HPA's policy value is an int32: 2**31 was stored, and 2**70 made the autoscaler's float overflow
        (lambda d: d["spec"].update(scaling={"scaleUp": {"policies": [{"type": "Pods", "value": 2**31, "periodSeconds": 60}]}}), "spec.scaling.scaleUp.policies[0].value", "at most 2147483647"),
        (lambda d: d["spec"].update(scaling={"scaleDown": {"policies": [{"type": "Percent", "value": 2**70, "periodSeconds": 60}]}}), "spec.scaling.scaleDown.policies[0].value", "at most 2147483647"),
        (lambda d: d["spec"]["nodeCount"].update(min=2**70, max=2**70), "spec.nodeCount.min", "at most 100"),
        (lambda d: d["spec"].update(nodeCount={"min": 2, "max": "6"}, burst={"enabled": True, "maxNodes": 2**70}), "spec.burst.maxNodes", "at most 100"),
        (lambda d: d["spec"].update(budget={"monthly": "-5"}), "spec.budget.monthly", "positive"),
        (lambda d: d["spec"].update(burst={"enabled": True, "maxNodes": 5}), "spec.burst.maxNodes", "must not exceed"),
    ],
)
def test_it_names_the_field_and_the_rule(mutate, field, fragment):
    document = article()
    mutate(document)
    problems = errors_of(document)
    assert field in problems, problems
    assert fragment in problems[field]


def test_it_reports_every_problem_at_once():
    document = article()
    document["metadata"]["name"] = "Bad Name"
    document["spec"]["gpuModel"] = "nope"
    document["spec"]["nodeTaints"][0]["effect"] = "Never"
    assert set(errors_of(document)) == {"metadata.name", "spec.gpuModel", "spec.nodeTaints[0].effect"}


def test_it_rejects_duplicate_taints():
    document = article()
    document["spec"]["nodeTaints"].append({"key": "pool", "value": "other", "effect": "NoSchedule"})
    assert "duplicate taint" in errors_of(document)["spec.nodeTaints[1]"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: &x [1]\nb: *x\n", "aliases are not accepted"),
        ("apiVersion: [unclosed\n", "malformed YAML at line"),
        ("---\na: 1\n---\nb: 2\n", "found 2"),
        ("- just\n- a list\n", "must be a mapping"),
        ("x: " + "y" * 70000, "larger than"),
    ],
)
def test_load_yaml_refuses_unsafe_or_malformed_input(text, fragment):
    with pytest.raises(ValidationError) as caught:
        load_yaml(text)
    assert fragment in str(caught.value)


def test_billion_laughs_is_refused_before_it_expands():
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for index in range(1, 10):
        bomb += f"{chr(97 + index)}: &{chr(97 + index)} [*{chr(96 + index)},*{chr(96 + index)},*{chr(96 + index)},*{chr(96 + index)}]\n"
    with pytest.raises(ValidationError, match="aliases"):
        load_yaml(bomb)


def test_server_fields_are_dropped_from_a_document_sent_back():
    document = article()
    document["metadata"].update(team="algorithm", generation=3, creationTimestamp="2026-01-01T00:00:00Z")
    document["status"] = {"phase": "Ready"}
    cleaned, server = split_server_fields(document)
    assert cleaned == article()
    assert server["team"] == "algorithm"


def test_merge_patch_follows_rfc_7386():
    document = {"spec": {"nodeCount": {"min": 2, "max": 6}, "nodeLabels": {"a": "1", "b": "2"}}}
    patched = merge_patch(document, {"spec": {"nodeCount": {"max": 8}, "nodeLabels": {"a": None}}})
    assert patched == {"spec": {"nodeCount": {"min": 2, "max": 8}, "nodeLabels": {"b": "2"}}}
    assert document["spec"]["nodeCount"]["max"] == 6  # the original is untouched


def test_node_labels_win_over_pool_labels_beside_the_system_labels():
    """C4: pool labels are inherited by nodes; nodeLabels are the most specific."""
    document = article()
    document["spec"]["nodeLabels"]["team"] = "algorithm-nodes"
    labels = effective_node_labels(parse_document(document, CATALOG), zone="cn-east-2a", billing="monthly", team="algorithm")
    assert labels["ebcloud.io/pool"] == "train-pool-a" and labels["ebcloud.io/team"] == "algorithm"
    assert labels["ebcloud.io/billing"] == "monthly"
    assert labels["team"] == "algorithm-nodes"
    assert labels["gpu-class"] == "a100"
    assert labels["topology.kubernetes.io/zone"] == "cn-east-2a"


@pytest.mark.parametrize(("where", "key"), [
    ("metadata.labels", "ebcloud.io/billing"), ("metadata.labels", "ebcloud.io/team"), ("spec.nodeLabels", "ebcloud.io/pool"),
    ("spec.nodeLabels", "kubernetes.io/hostname"), ("spec.nodeLabels", "topology.kubernetes.io/zone"),
    ("metadata.labels", "node.kubernetes.io/instance-type"), ("spec.nodeLabels", "k8s.io/anything"),
])  # fmt: skip
def test_a_pool_may_not_label_its_nodes_with_keys_kubernetes_or_the_control_plane_keep(where, key):
    """The kubelet's kubernetes.io/hostname was taken over by the forced apply, then deleted
    when the pool stopped declaring it; ebcloud.io/team on a node is what admission reads."""
    document = article()
    section = document["metadata"] if where == "metadata.labels" else document["spec"]
    section.setdefault("labels" if where == "metadata.labels" else "nodeLabels", {})[key] = "x"
    with pytest.raises(ValidationError) as caught:
        parse_document(document, replace(CATALOG, writing=True))
    assert [e.field for e in caught.value.errors] == [f"{where}.{key}"]
    stored = parse_document(document, CATALOG)  # one stored before the rule is read, and stalls no pass
    system = key.startswith("ebcloud.io/") or key == "topology.kubernetes.io/zone"
    assert (effective_node_labels(stored, zone="cn-east-2a", billing="monthly", team="algorithm")[key] == "x") is not system


def test_node_roles_and_other_prefixes_are_a_pools_to_set_and_kubernetes_taints_are_not():
    document = article()
    document["spec"]["nodeLabels"].update({"node-role.kubernetes.io/gpu": "", "example.com/rack": "r1", "ebcloud.io/project": "nlp"})
    assert parse_document(document, replace(CATALOG, writing=True)).node_labels["node-role.kubernetes.io/gpu"] == ""
    document["spec"]["nodeTaints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    with pytest.raises(ValidationError) as caught:
        parse_document(document, replace(CATALOG, writing=True))
    assert [(e.field, e.message) for e in caught.value.errors] == [
        ("spec.nodeTaints[0].key", "node.kubernetes.io/ taints are reserved for Kubernetes' own components; use a prefix of your own")]


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("120s", 120), ("1h30m", 5400), ("0s", 0), ("1h0m5s", 3605)])
def test_durations_parse_like_go(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "m30", "30x", "1m1h", "5m5m", "1.5h", " 30m"])
def test_malformed_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=100000))
def test_every_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


# --- hypothesis: every valid spec round-trips -------------------------------------------------

_alnum = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789")
_label_name = st.builds(lambda a, mid, b: a + mid + b, _alnum, st.text("abcxyz019-_.", max_size=10), _alnum)
_label_key = st.one_of(_label_name, st.builds(lambda p, n: f"{p}.io/{n}", st.text("abcdef", min_size=1, max_size=8), _label_name))
_label_value = st.one_of(st.just(""), _label_name)
_labels = st.dictionaries(_label_key, _label_value, max_size=4)
_dns_name = st.builds(lambda a, mid, b: a + mid + b, st.sampled_from("abcdefgh"), st.text("abc123-", max_size=20), _alnum).filter(lambda n: n not in ("new", "import"))


@st.composite
def valid_specs(draw) -> PoolSpec:
    high = draw(st.integers(min_value=1, max_value=100))
    low = draw(st.integers(min_value=0, max_value=high))
    taint_keys = draw(st.lists(_label_key, unique=True, max_size=3))
    hpa = replace(POOL_SCALING_DEFAULTS, scale_up=replace(POOL_SCALING_DEFAULTS.scale_up, tolerance=0.1))
    scaling = draw(st.one_of(st.none(), st.just(POOL_SCALING_DEFAULTS), st.just(hpa)))
    return PoolSpec(
        name=draw(_dns_name),
        labels=draw(_labels),
        node_type=draw(st.sampled_from(sorted(CATALOG.node_types))),
        gpu_model=draw(st.sampled_from(sorted(CATALOG.gpu_models))),
        min_nodes=low,
        max_nodes=high,
        region=draw(st.sampled_from(sorted(CATALOG.zones))),
        lease_type=draw(st.sampled_from(["monthly", "quarterly", "yearly"])),
        system_image=draw(st.sampled_from(["ubuntu-22.04-cuda-12.2", "registry.example.com/gpu/base:12.4"])),
        auto_repair=draw(st.booleans()),
        auto_renew=draw(st.booleans()),
        preemptible=draw(st.booleans()),
        node_labels=draw(_labels),
        node_taints=tuple(Taint(k, draw(_label_value), draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))) for k in taint_keys),
        scaling=scaling,
        burst=draw(st.builds(Burst, st.sampled_from([None, True, False]), st.integers(0, high - low))),
        budget=draw(st.one_of(st.none(), st.builds(lambda c: Budget(Decimal(c) / 100, "CNY"), st.integers(1, 10**9)))),
        scheduling_policy=draw(st.sampled_from(["binpack", "spread", "bestfit", "fgd"])),
    )


@settings(max_examples=150, deadline=None)
@given(valid_specs())
def test_every_valid_spec_round_trips_through_yaml(spec):
    document = to_document(spec)
    loaded = load_yaml(dump_yaml(document))
    assert parse_document(loaded, CATALOG) == spec
    assert parse_document(copy.deepcopy(loaded), CATALOG) == parse_document(load_yaml(dump_yaml(loaded)), CATALOG)


def test_a_scaling_block_alone_autoscales_burst_alone_takes_the_defaults_and_burst_false_stops_both():
    """`PoolSpec.autoscaling` (issue 20 item 4; seed D3/O4): the article's block as written
    autoscales; `burst.enabled: true` without one follows the defaults; `burst.enabled: false`
    is the explicit override that turns autoscaling off."""
    base = load_yaml((EXAMPLES / "create-train-pool.yaml").read_text())
    scaling = {"default": {"metrics": [{"type": "Pods", "pods": "queued_pods", "target": 2}]}}

    def autoscaling(**spec):
        document = copy.deepcopy(base)
        document["spec"].update(spec)
        assert spec_autoscales(document["spec"]) == (parse_document(document, CATALOG).autoscaling is not None)
        return parse_document(document, CATALOG).autoscaling

    assert autoscaling() is None
    assert [(m.name, m.target) for m in autoscaling(scaling=scaling).metrics] == [("queued_pods", 2.0)]
    assert autoscaling(burst={"enabled": True}) == POOL_SCALING_DEFAULTS
    assert autoscaling(scaling={}) == POOL_SCALING_DEFAULTS
    assert autoscaling(burst={"enabled": False}, scaling=scaling) is None
    assert autoscaling(burst={"maxNodes": 2}, scaling=scaling) is not None
    tuned = autoscaling(burst={"enabled": True}, scaling=scaling)
    assert [(m.name, m.target) for m in tuned.metrics] == [("queued_pods", 2.0)]


def test_the_tolerance_is_the_articles_unless_the_spec_sets_one():
    base = load_yaml((EXAMPLES / "train-pool-with-scaling.yaml").read_text())
    spec = parse_document(base, CATALOG)
    assert (spec.scaling.scale_up.tolerance, spec.scaling.scale_down.tolerance) == (0.0, 0.0)
    base["spec"]["scaling"]["scaleUp"] = {"tolerance": 0.1}
    assert parse_document(base, CATALOG).scaling.scale_up.tolerance == 0.1
    for bad in (-0.1, 1.5, "10%", True):
        base["spec"]["scaling"]["scaleUp"] = {"tolerance": bad}
        with pytest.raises(ValidationError) as caught:
            parse_document(base, CATALOG)
        assert [e.field for e in caught.value.errors] == ["spec.scaling.scaleUp.tolerance"]


@pytest.mark.parametrize("text", ["٣٠s", "3٠m", "１h", "1_0s"])
def test_durations_are_written_in_ascii_digits(text):
    """`\\d` took other scripts' digits: a stabilizationWindow of `٣٠s` was thirty seconds."""
    with pytest.raises(ValueError):
        parse_duration(text)
    document = article()
    document["spec"]["scaling"] = {"scaleDown": {"stabilizationWindow": text}}
    assert "not a duration" in errors_of(document)["spec.scaling.scaleDown.stabilizationWindow"]


@pytest.mark.parametrize("thresholds", [["x", 1], [[1]], [{"a": 1}], [None, 5], [80, "80"]])
def test_thresholds_that_are_not_all_integers_are_refused_on_the_item(thresholds):
    """They were sorted after the error was noted, and a mixed or unhashable list was a 500
    (API, import page, CLI)."""
    document = article()
    document["spec"]["budget"] = {"monthly": 100, "thresholds": thresholds}
    bad = next(i for i, item in enumerate(thresholds) if type(item) is not int)
    assert f"spec.budget.thresholds[{bad}]" in errors_of(document)


def test_a_burst_limit_the_new_min_leaves_no_room_for_says_both_ways_out():
    """`ebcloud node-pool scale batch-spot-t4 --min 2` answered only that maxNodes must not exceed
    max - min, a field the lead never touched (found by a QA sweep)."""
    document = article()
    document["spec"].update(nodeCount={"min": 4, "max": 12}, burst={"enabled": True, "maxNodes": 10})
    assert errors_of(document) == {"spec.burst.maxNodes": "must not exceed nodeCount.max - nodeCount.min (8): lower it to 8, or raise nodeCount.max to 14"}

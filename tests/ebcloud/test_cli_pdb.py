"""`ebcloud pdb ...` end to end against a live server: a lead guards the team's NLP trainers
with the example budget and sees how many may be evicted now."""

from __future__ import annotations

import json

from tests.ebcloud.cli_helpers import live, one_error_line
from tests.pools.pod_helpers import labelled_pods_running

EXAMPLE = "examples/pods/nlp-pdb.yaml"


@live
def test_a_lead_creates_lists_replaces_and_deletes_the_example_budget(ebcloud, login_as, actors, tmp_path):
    labelled_pods_running(actors, ("nlp-0", "nlp-1"), {"project": "nlp"})
    login_as("lead")
    result = ebcloud("pdb", "create", "-f", EXAMPLE)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "poddisruptionbudget/algorithm/nlp-trainers created (1 disruption allowed now)"
    header, row = ebcloud("pdb", "list").stdout.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "AGE"]
    assert row.split()[:5] == ["algorithm", "nlp-trainers", "N/A", "1", "1"]
    wide = ebcloud("pdb", "get", "algorithm/nlp-trainers", "-o", "wide").stdout
    assert "2 healthy, at least 1 must stay: 1 may be evicted now" in wide
    document = json.loads(ebcloud("pdb", "get", "algorithm/nlp-trainers", "-o", "json").stdout)
    document["spec"] = {"minAvailable": 2, "selector": document["spec"]["selector"]}
    edited = tmp_path / "pdb.json"
    edited.write_text(json.dumps(document))
    result = ebcloud("pdb", "replace", "algorithm/nlp-trainers", "-f", str(edited))
    assert result.stdout.strip() == "poddisruptionbudget/algorithm/nlp-trainers replaced (0 disruptions allowed now)"
    assert ebcloud("pdb", "delete", "algorithm/nlp-trainers").stdout.strip() == "poddisruptionbudget/algorithm/nlp-trainers deleted"
    assert ebcloud("pdb", "list").stderr.strip() == "No resources found."


@live
def test_a_bad_budget_and_a_missing_one_are_one_error_line(ebcloud, login_as, actors, tmp_path):
    login_as("member")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {minAvailable: 1, maxUnavailable: 1}\n")
    result = ebcloud("pdb", "create", "-f", str(bad))
    assert result.exit_code == 1 and one_error_line(result) == "error: spec: minAvailable and maxUnavailable cannot be both set"
    result = ebcloud("pdb", "get", "algorithm/none")
    assert result.exit_code == 1 and "not found" in one_error_line(result)
    assert ebcloud("pdb", "get", "no-slash").exit_code == 2

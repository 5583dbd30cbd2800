"""Pod priority through the front door: PriorityClasses resolved at submission as kube-apiserver's
Priority admission plugin does (refusals with field paths, the stored pod and the API's output),
the PriorityClass model's validation, and preemptionPolicy Never in the scheduler pass."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError as ModelValidationError

from pools.controllers.scheduler import scheduler_pass
from pools.core.errors import ValidationError
from pools.models import PriorityClass
from pools.models.pods import Pod
from pools.services import pods as pod_services
from tests.pools.pod_helpers import T0, TRAIN_POD, pod_document, pool_with_nodes, submit


def errors(document, user) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        pod_services.pod_create(user=user, document=document, now=T0)
    return {e.field: e.message for e in caught.value.errors}


def test_the_articles_pod_gets_the_training_class_value_and_policy(api, actors):
    response = api("member").post("/api/v1/pods/", TRAIN_POD.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.content
    spec = response.json()["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("training", 100, "PreemptLowerPriority")
    pod = Pod.objects.get(name="bert-train-0")
    assert (pod.priority, pod.preemption_policy) == (100, "PreemptLowerPriority")
    assert pod.document["spec"]["priorityClassName"] == "training"


def test_an_unknown_class_is_a_400_at_spec_priority_class_name(api, actors):
    document = pod_document("p")
    document["spec"]["priorityClassName"] = "urgent"
    response = api("member").post("/api/v1/pods/", document, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "spec.priorityClassName", "message": "no PriorityClass with name urgent was found"}]
    assert not Pod.objects.exists()


def test_a_priority_written_in_the_pod_is_refused_unless_its_class_gives_the_same(actors):
    own = pod_document("own")
    own["spec"]["priority"] = 100
    assert errors(own, actors["member"]) == {
        "spec.priority": "the integer value of priority (100) must not be provided in pod spec; "
        "priority admission controller computed 0 from the given PriorityClass name"
    }
    same = pod_document("same")
    same["spec"].update({"priorityClassName": "training", "priority": 100})
    assert pod_services.pod_create(user=actors["member"], document=same, now=T0).priority == 100


def test_the_global_default_class_applies_to_pods_that_name_none(actors):
    PriorityClass.objects.create(name="everyday", value=7, global_default=True)
    pod = submit(actors["member"], "plain")
    assert (pod.priority, pod.document["spec"]["priorityClassName"]) == (7, "everyday")
    assert submit(actors["member"], "trained", priority=100).priority == 100  # a named class wins


def test_a_system_class_is_known_without_a_row(actors):
    document = pod_document("critical")
    document["spec"]["priorityClassName"] = "system-cluster-critical"
    assert pod_services.pod_create(user=actors["member"], document=document, now=T0).priority == 2_000_000_000


def test_the_model_validates_a_class_as_kube_apiserver_does(db):
    with pytest.raises(ModelValidationError) as caught:
        PriorityClass(name="system-mine", value=2_000_000_001, preemption_policy="Never").full_clean()
    assert set(caught.value.message_dict) == {"name", "value"}
    PriorityClass.objects.create(name="everyday", value=1, global_default=True)
    with pytest.raises(ModelValidationError) as caught:
        PriorityClass(name="another", value=2, global_default=True).full_clean()
    assert "PriorityClass everyday is already marked as default" in caught.value.message_dict["global_default"][0]


def test_the_admin_lists_priority_classes_and_fixes_value_and_policy_once_created(client, actors):
    client.force_login(actors["admin"])
    assert client.get("/admin/pools/priorityclass/").status_code == 200
    training = PriorityClass.objects.get(name="training")
    page = client.get(f"/admin/pools/priorityclass/{training.pk}/change/")
    assert page.status_code == 200 and 'name="value"' not in page.content.decode()


def test_on_a_real_cluster_the_admin_shows_the_mirrored_classes_read_only(client, actors, settings):
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    client.force_login(actors["admin"])
    training = PriorityClass.objects.get(name="training")
    assert client.get("/admin/pools/priorityclass/").status_code == 200
    assert client.get("/admin/pools/priorityclass/add/").status_code == 403
    assert client.post(f"/admin/pools/priorityclass/{training.pk}/delete/", {"post": "yes"}).status_code == 403
    page = client.get(f"/admin/pools/priorityclass/{training.pk}/change/").content.decode()
    assert 'name="description"' not in page and PriorityClass.objects.filter(pk=training.pk).exists()


# --- preemptionPolicy: Never in the scheduler pass ----------------------------------------------


def test_a_never_pod_waits_instead_of_preempting_and_a_higher_one_preempts_it(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    low = submit(actors["member"], "low", gpus=8, priority=1, checkpointable=True)
    scheduler_pass(now=T0)
    patient = submit(actors["member"], "patient", gpus=8, priority=50, preemption_policy="Never", checkpointable=True)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    patient.refresh_from_db()
    low.refresh_from_db()
    assert result.preempted == [] and (patient.phase, patient.preemption_policy, low.phase) == ("Pending", "Never", "Running")

    low.delete()  # room frees up: the patient pod runs
    scheduler_pass(now=T0 + timedelta(minutes=2))
    patient.refresh_from_db()
    assert patient.phase == "Running"

    urgent = submit(actors["member"], "urgent", gpus=8, priority=100)
    result = scheduler_pass(now=T0 + timedelta(minutes=3))
    urgent.refresh_from_db()
    assert result.preempted == ["algorithm/patient"] and urgent.phase == "Running"

"""The price book in the admin: a price below zero, a discount above 1, a currency that is no ISO
code or not the account's, or digits of another script are refused beside the field and nothing
is saved; a bad price row written around the admin still makes no order that credits the account.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import budget_sync
from billing.models import Account, LeaseTerm, NodePrice, PriceBookEntry
from pools.core.errors import ValidationError
from pools.core.spec import MAX_MONTHLY_BUDGET
from pools.models import AuditEntry, GpuModel, GpuNodePool, NodeType, PoolOrder
from pools.models.cloud import SimPayment
from pools.providers.base import PaymentDeclined
from pools.providers.simulated import SimulatedCloud
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, reconcile

pytestmark = pytest.mark.django_db

EFFECTIVE = {"effective_from_0": "2026-11-01", "effective_from_1": "00:00:00"}  # before T0


def price_form(**over) -> dict:
    data = {
        "node_type": NodeType.objects.get(name="GPU_8_CARD").pk,
        "gpu_model": GpuModel.objects.get(name="A100_80G").pk,
        "monthly_price": "18000.00",
        "hourly_price": "90.0000",
        "currency": "CNY",
        **EFFECTIVE,
    }
    return {**data, **over}


def refused(response, field: str) -> str:
    """The form came back (200, no redirect) with an error beside `field`; its text."""
    assert response.status_code == 200, response.status_code
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    return " ".join(errors[field])


def nothing_changed(prices: int, audit: int) -> None:
    assert NodePrice.objects.count() == prices
    assert AuditEntry.objects.filter(action__startswith="price.").count() == audit


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("monthly_price", "-20000.00", "0 or more"),
        ("hourly_price", "-40.0000", "0 or more"),
        ("monthly_price", "999999999999.99", "at most 1000000000"),  # orders and budgets could not hold it
        ("hourly_price", "99999999.9999", "at most 10000000"),
        ("monthly_price", "١٢٣", "number"),  # Arabic-Indic digits: Django alone reads 123
        ("hourly_price", "1_0", "number"),
        ("currency", "zz!", "ISO 4217"),
        ("currency", "cny", "ISO 4217"),
    ],
)
def test_a_node_price_the_orders_could_not_use_is_refused_beside_its_field(admin_client, field, value, says):
    prices, audit = NodePrice.objects.count(), AuditEntry.objects.filter(action__startswith="price.").count()
    response = admin_client.post(reverse("admin:billing_nodeprice_add"), price_form(**{field: value}))
    assert says in refused(response, field)
    nothing_changed(prices, audit)


def test_a_price_in_another_currency_than_the_account_is_refused_saying_why(admin_client):
    prices = NodePrice.objects.count()
    response = admin_client.post(reverse("admin:billing_nodeprice_add"), price_form(currency="USD"))
    message = refused(response, "currency")
    assert "holds CNY" in message and "could not be paid" in message
    assert NodePrice.objects.count() == prices


def test_a_free_price_is_allowed_and_audited(admin_client, actors):
    """0 is a free tier (or an internal price), not an error: the order costs nothing."""
    response = admin_client.post(reverse("admin:billing_nodeprice_add"), price_form(monthly_price="0", hourly_price="0"))
    assert response.status_code == 302
    price = NodePrice.objects.get(monthly_price=0)
    entry = AuditEntry.objects.get(action="price.create", object_id=str(price.pk))
    assert entry.actor == actors["admin"] and entry.after["monthly_price"] == "0.00"
    pool = services.pool_create(user=actors["lead"], document=make_document("free-tier", nodeCount={"min": 1, "max": 1}), now=T0)
    assert pool.orders.get().amount == Decimal("0.00")


@pytest.mark.parametrize(("value", "ok"), [("1.5", False), ("-0.1", False), ("١", False), ("1", True), ("0.2", True)])
def test_a_lease_discount_is_a_fraction_from_0_to_1(admin_client, value, ok):
    form = {"lease_type": "monthly", "months": "1", "discount": value, "preemptible_discount": "", **EFFECTIVE}
    terms = LeaseTerm.objects.count()
    response = admin_client.post(reverse("admin:billing_leaseterm_add"), form)
    if ok:
        assert response.status_code == 302 and LeaseTerm.objects.count() == terms + 1
    else:
        refused(response, "discount")
        assert LeaseTerm.objects.count() == terms


def test_a_lease_term_names_a_lease_type_a_pool_can_ask_for(admin_client):
    """A term named "Monthly" or "weekly" could never be bought (`spec.leaseType` takes only
    monthly, quarterly and yearly): the admin form refuses it on the field."""
    terms = LeaseTerm.objects.count()
    for name in ("Monthly", "weekly"):
        form = {"lease_type": name, "months": "1", "discount": "0", "preemptible_discount": "", **EFFECTIVE}
        refused(admin_client.post(reverse("admin:billing_leaseterm_add"), form), "lease_type")
    assert LeaseTerm.objects.count() == terms


@pytest.mark.parametrize(("months", "said"), [("0", "at least 1 month"), ("121", "at most 120 months"), ("2147483648", "at most 120 months")])
def test_a_lease_term_of_no_months_or_of_more_than_ten_years_is_refused(admin_client, months, said):
    """A term of 2**31 months was saved (SQLite does not bound a small integer): the order it
    priced ended in a year no date can hold, and every pass over its pool failed for good, its
    deletion too (found by a QA sweep)."""
    terms = LeaseTerm.objects.count()
    form = {"lease_type": "monthly", "months": months, "discount": "0", "preemptible_discount": "", **EFFECTIVE}
    assert said in refused(admin_client.post(reverse("admin:billing_leaseterm_add"), form), "months")
    assert LeaseTerm.objects.count() == terms


@pytest.mark.parametrize(
    ("kind", "amount", "currency", "field"),
    [
        ("storage_gb_month", "-0.40", "CNY", "amount"),
        ("preemptible_discount", "1.6", "CNY", "amount"),
        ("registry_pool_month", "500", "EUR", "currency"),
    ],
)
def test_a_price_book_entry_out_of_range_is_refused(admin_client, kind, amount, currency, field):
    entries = PriceBookEntry.objects.count()
    form = {"kind": kind, "amount": amount, "currency": currency, **EFFECTIVE}
    refused(admin_client.post(reverse("admin:billing_pricebookentry_add"), form), field)
    assert PriceBookEntry.objects.count() == entries


def assert_headed_as_saved(response, row, *, refused_text: str) -> None:
    """The heading (Django's subtitle), the page title and the breadcrumbs name `row` as saved."""
    saved = str(type(row).objects.get(pk=row.pk))
    assert response.context["subtitle"] == saved and str(response.context["original"]) == saved
    page = response.content.decode()
    assert f"<h2>{saved}</h2>" in page and refused_text not in page


def test_an_existing_price_changed_to_a_negative_one_keeps_its_value(admin_client):
    price = NodePrice.objects.order_by("pk").first()
    form = {
        "node_type": price.node_type_id, "gpu_model": price.gpu_model_id, "monthly_price": "-1",
        "hourly_price": str(price.hourly_price), "currency": price.currency,
        "effective_from_0": price.effective_from.strftime("%Y-%m-%d"), "effective_from_1": price.effective_from.strftime("%H:%M:%S"),
    }  # fmt: skip
    response = admin_client.post(reverse("admin:billing_nodeprice_change", args=[price.pk]), form)
    refused(response, "monthly_price")
    assert NodePrice.objects.get(pk=price.pk).monthly_price == price.monthly_price
    # the page is headed with the row as saved, not the price refused
    assert_headed_as_saved(response, price, refused_text=": -1 CNY/month")
    assert not AuditEntry.objects.filter(action="price.update").exists()


# --- rows written before these checks (or around the admin) ------------------------------------


def _negative_price() -> None:
    NodePrice.objects.create(
        node_type=NodeType.objects.get(name="GPU_8_CARD"), gpu_model=GpuModel.objects.get(name="A100_80G"),
        monthly_price=Decimal("-20000.00"), hourly_price=Decimal("0"), currency="CNY", effective_from=T0.replace(month=11),
    )  # fmt: skip


def test_a_negative_price_row_makes_no_order(actors):
    _negative_price()
    with pytest.raises(ValidationError, match="negative order"):
        services.pool_create(user=actors["lead"], document=make_document("free-money", nodeCount={"min": 2, "max": 2}), now=T0)
    assert not PoolOrder.objects.exists() and not GpuNodePool.objects.filter(name="free-money").exists()


def test_an_order_too_large_to_record_is_refused_and_a_default_budget_stops_at_the_most_a_budget_holds(actors):
    """A price from before the ceiling, 999,999,999,999.99 a month (hostile-input probe): the
    order of 12 nodes for a year overflowed its column, after which the orders list, the pool's
    page and the metering that syncs every team's budgets answered 500."""
    NodePrice.objects.create(
        node_type=NodeType.objects.get(name="GPU_8_CARD"), gpu_model=GpuModel.objects.get(name="A100_80G"),
        monthly_price=Decimal("999999999999.99"), hourly_price=Decimal("0"), currency="CNY", effective_from=T0.replace(month=11),
    )  # fmt: skip
    for nodes, lease in ((12, "yearly"), (1, "yearly")):  # the order; one node's share of a year (review)
        with pytest.raises(ValidationError, match="more than the ledger can record") as refused:
            services.pool_create(user=actors["lead"], document=make_document("pricey", nodeCount={"min": nodes, "max": nodes}, leaseType=lease), now=T0)
        assert refused.value.errors[0].field == "spec.nodeCount"
        assert not PoolOrder.objects.exists() and not GpuNodePool.objects.filter(name="pricey").exists()
    services.pool_create(user=actors["lead"], document=make_document("pricey", nodeCount={"min": 2, "max": 2}), now=T0)
    (budget,) = budget_sync.pool_budgets_synced(now=T0)
    assert budget.monthly_amount == MAX_MONTHLY_BUDGET and budget.default_note.endswith("(the most a budget holds)")


def test_a_discount_row_above_one_makes_no_order(actors):
    LeaseTerm.objects.create(lease_type="monthly", months=1, discount=Decimal("1.5"), effective_from=T0.replace(month=11))
    with pytest.raises(ValidationError, match="negative order"):
        services.pool_create(user=actors["lead"], document=make_document("disc", nodeCount={"min": 1, "max": 1}), now=T0)


def test_the_simulated_cloud_never_pays_a_negative_amount(catalog):
    balance = Account.objects.get(name="default").balance
    with pytest.raises(PaymentDeclined, match="below zero"):
        SimulatedCloud().pay(order_id=1, amount=Decimal("-40000.00"), currency="CNY", now=T0)
    assert Account.objects.get(name="default").balance == balance and not SimPayment.objects.exists()


def test_an_order_below_zero_from_before_stalls_its_pool_and_leaves_the_balance(actors):
    pool = approved_pool(actors, make_document("old-order", nodeCount={"min": 1, "max": 1}))
    PoolOrder.objects.filter(pool=pool).update(amount=Decimal("-20000.00"))
    balance = Account.objects.get(name="default").balance
    reconcile(pool, T0)
    assert Account.objects.get(name="default").balance == balance
    assert not SimPayment.objects.exists()
    assert GpuNodePool.objects.get(pk=pool.pk).pending_reason.startswith("PaymentDeclined")


def test_a_price_in_force_for_a_billed_pool_is_not_deleted_or_moved_later_and_a_new_version_is(admin_client, actors):
    """A deleted price took a pool's on-demand hours off the costs for good: metering skips an hour
    with no price and never restates it (found by a QA sweep). The delete is refused as a
    protected object is, naming the pool; a price not needed (another version in force) goes."""
    from pools.services import pools as pool_services
    from tests.conftest import make_document

    pool = pool_services.pool_create(user=actors["lead"], document=make_document("priced"))
    price = NodePrice.objects.filter(node_type=pool.node_type, gpu_model=pool.gpu_model).latest("effective_from")
    page = admin_client.post(reverse("admin:billing_nodeprice_delete", args=[price.pk]), {"post": "yes"})
    assert page.status_code == 200 and NodePrice.objects.filter(pk=price.pk).exists()
    assert f"the price in force for pool priced ({pool.node_type.name}, {pool.gpu_model.name})" in page.content.decode()
    bulk = admin_client.post(reverse("admin:billing_nodeprice_changelist"), {"action": "delete_selected", "_selected_action": [price.pk], "post": "yes"})
    assert bulk.status_code == 200 and NodePrice.objects.filter(pk=price.pk).exists()
    form = {
        "node_type": price.node_type_id, "gpu_model": price.gpu_model_id, "monthly_price": str(price.monthly_price),
        "hourly_price": str(price.hourly_price), "currency": price.currency, "effective_from_0": "2099-01-01", "effective_from_1": "00:00:00",
    }  # fmt: skip
    moved = admin_client.post(reverse("admin:billing_nodeprice_change", args=[price.pk]), form)
    assert moved.status_code == 200 and "would have no price in force: add a new price with a later Effective from" in moved.content.decode()
    older = NodePrice.objects.create(node_type=price.node_type, gpu_model=price.gpu_model, monthly_price=price.monthly_price,
                                     hourly_price=price.hourly_price, currency=price.currency, effective_from=price.effective_from.replace(year=price.effective_from.year - 1))  # fmt: skip
    assert admin_client.post(reverse("admin:billing_nodeprice_delete", args=[older.pk]), {"post": "yes"}).status_code == 302


def test_a_price_moved_to_another_gpu_model_leaves_no_pool_unpriced(admin_client, actors):
    """Only a later Effective from was checked: changing the GPU model of the only price in force
    saved, and the pool had none (found by review)."""
    from pools.models import GpuModel
    from pools.services import pools as pool_services
    from tests.conftest import make_document

    pool = pool_services.pool_create(user=actors["lead"], document=make_document("priced"))
    NodePrice.objects.filter(node_type=pool.node_type, gpu_model=pool.gpu_model).exclude(
        pk=NodePrice.objects.filter(node_type=pool.node_type, gpu_model=pool.gpu_model).latest("effective_from").pk).delete()
    price = NodePrice.objects.get(node_type=pool.node_type, gpu_model=pool.gpu_model)
    other = GpuModel.objects.exclude(pk=pool.gpu_model_id).first()
    form = {
        "node_type": price.node_type_id, "gpu_model": other.pk, "monthly_price": str(price.monthly_price), "hourly_price": str(price.hourly_price),
        "currency": price.currency, "effective_from_0": price.effective_from.strftime("%Y-%m-%d"), "effective_from_1": price.effective_from.strftime("%H:%M:%S"),
    }  # fmt: skip
    moved = admin_client.post(reverse("admin:billing_nodeprice_change", args=[price.pk]), form)
    said = f"Pool priced ({pool.node_type.name}, {pool.gpu_model.name}) would have no price in force"
    assert moved.status_code == 200 and said in moved.content.decode()
    assert NodePrice.objects.get(pk=price.pk).gpu_model_id == pool.gpu_model_id
    assert_headed_as_saved(moved, price, refused_text=f"{price.node_type.name} {other.name}")
    second = pool_services.pool_create(user=actors["lead"], document=make_document("priced-too"))
    moved = admin_client.post(reverse("admin:billing_nodeprice_change", args=[price.pk]), form)
    assert f"Pools priced ({pool.node_type.name}, {pool.gpu_model.name}), {second.name} (" in moved.content.decode()


def test_the_price_in_force_when_an_hour_still_to_be_metered_began_is_not_deleted(admin_client, actors):
    """Metering prices an hour at the price in force when it began: a newer price in force from
    the middle of this hour left the hour itself unpriced once the older one was deleted, and
    metering skipped it for good (found by review)."""
    from billing.hours import floor_hour
    from pools.services import pools as pool_services
    from tests.conftest import make_document

    pool = pool_services.pool_create(user=actors["lead"], document=make_document("priced"))
    old = NodePrice.objects.filter(node_type=pool.node_type, gpu_model=pool.gpu_model).latest("effective_from")
    NodePrice.objects.filter(node_type=old.node_type, gpu_model=old.gpu_model).exclude(pk=old.pk).delete()
    now = timezone.now()
    hour = floor_hour(now)
    new = NodePrice.objects.create(node_type=old.node_type, gpu_model=old.gpu_model, monthly_price=old.monthly_price, hourly_price=old.hourly_price,
                                   currency=old.currency, effective_from=hour + (now - hour) / 2)  # fmt: skip
    page = admin_client.post(reverse("admin:billing_nodeprice_delete", args=[old.pk]), {"post": "yes"})
    assert page.status_code == 200 and NodePrice.objects.filter(pk=old.pk).exists()
    assert "the price in force for pool priced (" in page.content.decode()
    new.effective_from = hour
    new.save()
    assert admin_client.post(reverse("admin:billing_nodeprice_delete", args=[old.pk]), {"post": "yes"}).status_code == 302


def test_the_price_book_lists_the_discount_as_a_share_off_and_fees_as_money(admin_client):
    """The list showed the preemptible discount as "0.600000" beside "CNY", a fraction read as money."""
    from billing.demo import load_prices

    load_prices()
    page = admin_client.get(reverse("admin:billing_pricebookentry_changelist")).content.decode()
    assert "60% off the on-demand price" in page and "500.00 CNY" in page and "0.600000" not in page
    entry = PriceBookEntry.objects.get(kind=PriceBookEntry.Kind.PREEMPTIBLE_DISCOUNT)
    assert str(entry).startswith("Preemptible discount (fraction off the on-demand price): 60% off the on-demand price from ")

"""The account in the admin: the balance is shown, never written back, so a payment made while
the page was open stays paid; a top-up or a correction is an amount added under the row lock,
with a reason, in the audit log with the balance before and after.
"""

from __future__ import annotations

import re
import threading
import time
from decimal import Decimal

import pytest
from django import db
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from billing.accounts import account_adjust
from billing.models import Account
from pools.core.errors import ValidationError
from pools.models import AuditEntry
from pools.models.cloud import SimPayment
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def account(catalog) -> Account:
    return Account.objects.get(name="default")


def change_url(account: Account) -> str:
    return reverse("admin:billing_account_change", args=[account.pk])


def balance(account: Account) -> Decimal:
    return Account.objects.get(pk=account.pk).balance


def adjustments() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action="account.adjust").order_by("id"))


def test_the_change_page_shows_the_balance_but_has_no_field_for_it(admin_client, account):
    page = admin_client.get(change_url(account)).content.decode()
    assert "1000000.00" in page
    assert not re.search(r'name="balance"', page)
    assert re.search(r'name="adjustment"', page) and re.search(r'name="reason"', page)


def test_saving_the_page_after_a_payment_keeps_the_payment(admin_client, actors, account):
    """The admin opens the page, the controller pays an order, the admin presses Save with
    the balance it showed: the payment stays debited, and nothing is audited."""
    pool = approved_pool(actors, make_document("pay", nodeCount={"min": 2, "max": 2}))
    page = admin_client.get(change_url(account)).content.decode()
    assert "1000000.00" in page
    reconcile(pool, T0)  # meanwhile
    paid = SimPayment.objects.get(order_id=pool.orders.get().pk).amount
    assert paid > 0
    response = admin_client.post(change_url(account), {"name": "default", "balance": "1000000.00", "currency": "CNY", "adjustment": "", "reason": ""})
    assert response.status_code == 302
    assert balance(account) == Decimal("1000000.00") - paid
    assert adjustments() == []


def test_a_top_up_adds_to_the_balance_as_it_is_after_a_payment_made_meanwhile(admin_client, actors, account):
    before = balance(account)
    pool = approved_pool(actors, make_document("pay", nodeCount={"min": 2, "max": 2}))
    admin_client.get(change_url(account))  # the page opened at the old balance
    reconcile(pool, T0)
    paid = SimPayment.objects.get(order_id=pool.orders.get().pk).amount
    response = admin_client.post(change_url(account), {"adjustment": "50000.00", "reason": "invoice 2026-118"})
    assert response.status_code == 302
    assert balance(account) == before + Decimal("50000.00") - paid
    [entry] = adjustments()
    assert (entry.actor, entry.object_type, entry.object_id) == (actors["admin"], "billing.Account", str(account.pk))
    assert entry.before == {"balance": str(before - paid), "currency": "CNY"}
    assert entry.after == {"balance": str(before - paid + Decimal("50000.00")), "currency": "CNY", "amount": "50000.00", "reason": "invoice 2026-118"}


def test_a_correction_takes_an_amount_off(admin_client, account):
    assert admin_client.post(change_url(account), {"adjustment": "-2500.50", "reason": "top-up entered twice"}).status_code == 302
    assert balance(account) == Decimal("997499.50")
    assert adjustments()[0].after["amount"] == "-2500.50"


@pytest.mark.parametrize(
    ("form", "field", "says"),
    [
        ({"adjustment": "5000", "reason": ""}, "reason", "why"),
        ({"adjustment": "0", "reason": "nothing"}, "adjustment", "other than 0"),
        ({"adjustment": "", "reason": "invoice 7"}, "adjustment", "amount"),
        ({"adjustment": "-1000000.01", "reason": "refund"}, "adjustment", "below zero"),
        ({"adjustment": "١٠٠", "reason": "invoice 7"}, "adjustment", "number"),
        ({"adjustment": "1e400", "reason": "invoice 7"}, "adjustment", ""),
        ({"adjustment": "100", "reason": "invoice\x1b]0;x\x07"}, "reason", "Control characters"),
    ],
)
def test_a_bad_adjustment_is_refused_beside_its_field_and_changes_nothing(admin_client, account, form, field, says):
    response = admin_client.post(change_url(account), form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors and says in " ".join(errors[field]), errors
    assert balance(account) == Decimal("1000000.00")
    assert adjustments() == []


def test_the_service_checks_the_balance_under_the_lock(actors, account):
    with pytest.raises(ValidationError, match="below zero"):
        account_adjust(account_id=account.pk, amount=Decimal("-1000000.01"), reason="refund", actor=actors["admin"])
    with pytest.raises(ValidationError, match="why"):
        account_adjust(account_id=account.pk, amount=Decimal("1"), reason=" ", actor=actors["admin"])
    assert balance(account) == Decimal("1000000.00") and adjustments() == []
    assert account_adjust(account_id=account.pk, amount=Decimal("1"), reason="test", actor=actors["admin"]).balance == Decimal("1000001.00")


def test_a_new_account_is_audited_and_one_in_another_currency_than_the_prices_is_refused(admin_client, actors, account, settings):
    add = reverse("admin:billing_account_add")
    assert admin_client.post(add, {"name": "reserve", "balance": "10.00", "currency": "CNY"}).status_code == 302
    created = AuditEntry.objects.get(action="account.create")
    assert (created.actor, created.after["balance"], created.before) == (actors["admin"], "10.00", None)
    for form, field in [
        ({"name": "eur", "balance": "-1", "currency": "EUR"}, "balance"),
        ({"name": "eur", "balance": "١٠", "currency": "EUR"}, "balance"),
        ({"name": "eur", "balance": "1", "currency": "euro"}, "currency"),
    ]:
        assert field in admin_client.post(add, form).context["adminform"].form.errors
    settings.EBCLOUD_SIM_ACCOUNT = "payer"
    response = admin_client.post(add, {"name": "payer", "balance": "1", "currency": "USD"})
    assert "node prices are in CNY" in " ".join(response.context["adminform"].form.errors["currency"])
    assert sorted(Account.objects.values_list("name", flat=True)) == ["default", "reserve"]


def test_deleting_an_account_is_audited(admin_client, actors):
    reserve = Account.objects.create(name="reserve", balance=Decimal("10.00"), currency="CNY")
    assert admin_client.post(reverse("admin:billing_account_delete", args=[reserve.pk]), {"post": "yes"}).status_code == 302
    entry = AuditEntry.objects.get(action="account.delete")
    assert (entry.actor, entry.before["balance"], entry.after) == (actors["admin"], "10.00", None)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks between connections: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_top_up_waits_for_a_payment_holding_the_row_lock_and_adds_to_its_result(actors):
    """A payment in progress holds the account's row lock (as `SimulatedCloud.pay` does); the
    admin's top-up, saved meanwhile from another connection, waits for it and adds to the
    balance the payment left."""
    account = Account.objects.get(name="default")
    client = Client()
    client.force_login(actors["admin"])
    answers = []

    def top_up():
        try:
            answers.append(client.post(change_url(account), {"adjustment": "50000.00", "reason": "invoice 7"}).status_code)
        finally:
            db.connections.close_all()

    with transaction.atomic():
        locked = Account.objects.select_for_update().get(pk=account.pk)
        admin = threading.Thread(target=top_up)
        admin.start()
        time.sleep(0.5)
        assert admin.is_alive()  # waiting for the lock
        Account.objects.filter(pk=account.pk).update(balance=locked.balance - Decimal("40000.00"))
    admin.join(timeout=30)
    assert answers == [302]
    assert balance(account) == Decimal("1000000.00") - Decimal("40000.00") + Decimal("50000.00")
    assert adjustments()[0].before["balance"] == "960000.00"

"""Top-ups and corrections of the account orders are paid from, the only way people change its
balance (the lifecycle controller's payments are the other way it moves).

A form that wrote the balance it had read would undo every payment made since the page was
opened. An adjustment is an amount instead, added to the balance as stored when it is applied:
under the row lock that payments take (`SimulatedCloud.pay`), so a payment waits for it or it
waits for the payment, and neither is lost. Each one is in the audit log with the balance before
and after, the amount and the reason.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from billing.models import Account
from pools.core.errors import ValidationError
from pools.services.audit import audit_record


def account_adjust(*, account_id: int, amount: Decimal, reason: str, actor) -> Account:
    """Add `amount` (negative: a correction) to the balance; refuse one that would leave it below
    zero, as read under the lock (the form checked it earlier, but a payment may have come in
    since). Returns the account as stored afterwards."""
    if not amount:
        raise ValidationError("enter an amount other than 0", field="adjustment")
    if not reason.strip():
        raise ValidationError("say why the balance changes", field="reason")
    with transaction.atomic():
        account = Account.objects.select_for_update().get(pk=account_id)
        before = account.balance
        after = before + amount
        if after < 0:
            raise ValidationError(
                f"the balance is {before} {account.currency}: taking {-amount} off would leave it below zero", field="adjustment"
            )
        Account.objects.filter(pk=account.pk).update(balance=after)
        account.balance = after
        audit_record(
            actor=actor,
            action="account.adjust",
            obj=account,
            before={"balance": str(before), "currency": account.currency},
            after={"balance": str(after), "currency": account.currency, "amount": str(amount), "reason": reason.strip()},
        )
    return account

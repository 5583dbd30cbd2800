import copy

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.utils import timezone

from billing.accounts import account_adjust
from billing.models import (
    CURRENCY_CODE,
    Account,
    Budget,
    BudgetAlert,
    LeaseTerm,
    NodePrice,
    PriceBookEntry,
)
from billing.order_context import payment_account
from billing.price_coverage import pools_left_unpriced
from pools.core.errors import control_characters
from pools.views import form_fields
from pools.views.admin_audit import AuditedModelAdmin, ViewOnlyAdmin


class AuditedPriceAdmin(AuditedModelAdmin):
    """People change prices here (the demo seed aside), and every change is in the audit log
    (issue #9 item 4): `price.create`, `price.update` (skipped when nothing changed),
    `price.delete`, with the row before and after."""

    audit_prefix = "price"


class AccountCurrencyForm(forms.ModelForm):
    """A price in another currency than the account's would price orders the account cannot
    pay (the simulated cloud declines them, and the pool stalls) and costs that do not add up
    with what was paid: the form refuses it and says so."""

    would_break = "orders priced in {currency} could not be paid from it"

    def clean_currency(self):
        currency = self.cleaned_data["currency"]
        CURRENCY_CODE(currency)  # first the shape, so that "zz!" is told what a code looks like
        account = payment_account()
        if account is not None and currency != account.currency:
            raise forms.ValidationError(
                f"The account orders are paid from ({account.name}) holds {account.currency}: "
                f"{self.would_break.format(currency=currency)}. Enter {account.currency}."
            )
        return currency


class PriceBookEntryForm(AccountCurrencyForm):
    would_break = "fees in {currency} would not add up with the orders paid from it"


class NodePriceForm(AccountCurrencyForm):
    def clean(self):
        """A price moved later, or to another node type or GPU model, may leave pools with no
        price in force now (billing/price_coverage.py): refused, saying which."""
        cleaned = super().clean()
        keys = ("effective_from", "node_type", "gpu_model")
        if self.instance.pk and not self.errors and any(key in self.changed_data for key in keys):
            moved = copy.copy(self.instance)
            for key in keys:
                setattr(moved, key, cleaned[key])
            if unpriced := pools_left_unpriced(removed=(), moved=moved, now=timezone.now()):
                pools = f"{'Pool' if len(unpriced) == 1 else 'Pools'} {', '.join(unpriced)}"
                raise forms.ValidationError(f"{pools} would have no price in force: add a new price with a later Effective from instead of moving this one.")
        return cleaned


@admin.register(NodePrice)
class NodePriceAdmin(AuditedPriceAdmin):
    form = NodePriceForm
    list_display = ("node_type", "gpu_model", "monthly_price", "hourly_price", "currency", "effective_from")
    list_filter = ("gpu_model", "node_type")

    def get_deleted_objects(self, objs, request):
        """A delete that leaves pools with no price in force is refused, as a protected object
        is, for one row and for the bulk action alike (billing/price_coverage.py)."""
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        unpriced = pools_left_unpriced(removed=objs, now=timezone.now())
        protected = [*protected, *(f"the price in force for pool {pool}: add a new price with a later Effective from instead" for pool in unpriced)]
        return deleted, counts, perms, protected


@admin.register(LeaseTerm)
class LeaseTermAdmin(AuditedPriceAdmin):
    list_display = ("lease_type", "months", "discount", "preemptible_discount", "effective_from")


@admin.register(PriceBookEntry)
class PriceBookEntryAdmin(AuditedPriceAdmin):
    form = PriceBookEntryForm
    list_display = ("kind", "price", "effective_from")

    @admin.display(description="Price", ordering="amount")
    def price(self, entry: PriceBookEntry) -> str:
        return entry.price_text


class AccountCreateForm(forms.ModelForm):
    """A new account with its opening balance. The one orders are paid from
    (`EBCLOUD_SIM_ACCOUNT`) must hold the node prices' currency, or no order could be paid."""

    def clean(self):
        cleaned = super().clean()
        name, currency = cleaned.get("name"), cleaned.get("currency")
        if name == settings.EBCLOUD_SIM_ACCOUNT and currency:
            other = NodePrice.objects.exclude(currency=currency).values_list("currency", flat=True).first()
            if other is not None:
                self.add_error("currency", f"The price book's node prices are in {other}: orders priced from them could not be paid from an account in {currency}.")
        return cleaned


class AccountAdjustForm(forms.ModelForm):
    """An existing account: its balance is shown, never written back (a payment made while the
    page was open would be undone); the admin enters an amount to add instead, and why."""

    adjustment = form_fields.DecimalField(
        max_digits=16, decimal_places=2, required=False, label="Top up by",
        help_text="Added to the balance as it is when you save (payments made meanwhile stay paid). "
        "A negative amount corrects a mistake.",
    )  # fmt: skip
    reason = forms.CharField(max_length=200, required=False, help_text="Why the balance changes: an invoice or ticket number, what is corrected.")

    class Meta:
        model = Account
        fields = []

    def clean(self):
        cleaned = super().clean()
        amount, reason = cleaned.get("adjustment"), cleaned.get("reason", "").strip()
        if problem := control_characters(reason):
            self.add_error("reason", problem[0].upper() + problem[1:] + ".")
        if amount is None:
            if reason and "adjustment" not in self.errors:
                self.add_error("adjustment", "Enter the amount this reason is for.")
            return cleaned
        if amount == 0:
            self.add_error("adjustment", "Enter an amount other than 0 (a negative one corrects the balance).")
            return cleaned
        if not reason:
            self.add_error("reason", "Say why the balance changes.")
        # Locked until the admin's transaction ends: the save that follows adds to this balance.
        with transaction.atomic():
            locked = Account.objects.select_for_update().get(pk=self.instance.pk)
        if locked.balance + amount < 0:
            self.add_error("adjustment", f"The balance is {locked.balance} {locked.currency}: taking {-amount} off would leave it below zero.")
        return cleaned


@admin.register(Account)
class AccountAdmin(AuditedModelAdmin):
    """The account orders are paid from. Its balance is read-only here: a top-up or a
    correction is an amount added under the row lock (`billing.accounts.account_adjust`),
    audited as `account.adjust`; creating and deleting an account are audited too."""

    audit_prefix = "account"
    list_display = ("name", "balance", "currency")

    def get_readonly_fields(self, request, obj=None):
        # The name is what the simulated cloud pays from, and a currency is not converted by
        # relabelling it: both stay as created.
        return ("name", "currency", "balance") if obj is not None else ()

    def get_fields(self, request, obj=None):
        return ("name", "currency", "balance", "adjustment", "reason") if obj is not None else ("name", "currency", "balance")

    def get_form(self, request, obj=None, **kwargs):
        kwargs["form"] = AccountAdjustForm if obj is not None else AccountCreateForm
        return super().get_form(request, obj, **kwargs)

    def save_model(self, request, obj, form, change):
        if not change:
            super().save_model(request, obj, form, change)
            return
        amount = form.cleaned_data.get("adjustment")
        if amount:  # never obj.save(): it would write back the balance the form read
            obj.balance = account_adjust(account_id=obj.pk, amount=amount, reason=form.cleaned_data["reason"], actor=request.user).balance


@admin.register(Budget)
class BudgetAdmin(ViewOnlyAdmin):
    list_display = [f.name for f in Budget._meta.fields if f.name != "id"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ViewOnlyAdmin):
    list_display = [f.name for f in BudgetAlert._meta.fields if f.name != "id"]

"""Finance's budget forms: they only validate and shape; `billing.budget_admin` decides and
its `ValidationError`s are shown beside the field they name (design §6)."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from pools.core.errors import ValidationError
from pools.core.spec import MAX_MONTHLY_BUDGET
from pools.views import form_fields


class PoolBudgetForm(forms.Form):
    monthly = form_fields.DecimalField(
        label="Monthly budget", required=False, min_value=Decimal("0.01"), max_value=MAX_MONTHLY_BUDGET,
        max_digits=14, decimal_places=2,
        help_text="Leave empty to use the pool's own budget again (its spec's, else the default)",
    )  # fmt: skip


class TeamBudgetForm(forms.Form):
    team = forms.ChoiceField(label="Team")
    monthly = form_fields.DecimalField(
        label="Monthly budget", min_value=Decimal("0.01"), max_value=MAX_MONTHLY_BUDGET, max_digits=14, decimal_places=2,
        help_text="Everything the team is charged in a month, over all its pools",
    )  # fmt: skip
    currency = forms.CharField(label="Currency", max_length=3, initial="CNY",
                               help_text="The one the team is charged in (the price book's), e.g. CNY")  # fmt: skip
    thresholds = forms.CharField(
        label="Alert at (% of the budget)", initial="80, 100", max_length=100,
        help_text="Comma-separated percentages; each alerts once a month on spend and once on the forecast",
    )  # fmt: skip

    def __init__(self, *args, teams=(), editing=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t.slug, t.name) for t in teams]
        if editing is not None:
            self.fields["team"].disabled = True

    def clean_thresholds(self) -> list[int]:
        values = []
        for part in self.cleaned_data["thresholds"].split(","):
            part = part.strip().rstrip("%").strip()
            if not part:
                continue
            if not (part.isascii() and part.isdigit()):  # '²' is a digit to isdigit(), not to int()
                raise forms.ValidationError(f"{part!r} is not a whole percentage")
            values.append(int(part))
        if not values:
            raise forms.ValidationError("give at least one percentage, e.g. 80")
        return values

    def clean_currency(self) -> str:
        return self.cleaned_data["currency"].strip().upper()

    def add_service_errors(self, error: ValidationError) -> None:
        for item in error.errors:
            self.add_error(item.field if item.field in self.fields else None, item.message)

"""Demo prices beyond the per-node price book (C1): `load_prices()` is idempotent.

`pools.demo.seed.load_catalog` loads node prices and lease terms; this adds the preemptible discount,
storage, cross-zone network and registry fees, effective from the same epoch. `seed_demo` should
call both.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from billing.models import PriceBookEntry

CURRENCY = "CNY"
PRICES = {
    PriceBookEntry.Kind.PREEMPTIBLE_DISCOUNT: Decimal("0.60"),  # 60% off the on-demand price
    PriceBookEntry.Kind.STORAGE_GB_MONTH: Decimal("0.35"),
    PriceBookEntry.Kind.NETWORK_CROSS_ZONE_GB: Decimal("0.50"),
    PriceBookEntry.Kind.REGISTRY_POOL_MONTH: Decimal("500.00"),
}


@transaction.atomic
def load_prices() -> None:
    epoch = timezone.now().replace(
        year=2024, month=1, day=1, hour=0, minute=0, second=0, microsecond=0
    )
    for kind, amount in PRICES.items():
        PriceBookEntry.objects.update_or_create(
            kind=kind, effective_from=epoch, defaults={"amount": amount, "currency": CURRENCY}
        )

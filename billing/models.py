"""The price book and the account that orders are paid from (seed C1, design §3).

Prices are versioned by `effective_from`: a change never rewrites what was quoted before it.
Money is Decimal with a currency code.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class NodePrice(models.Model):
    """Monthly and on-demand hourly price of one node of a type and GPU model."""

    node_type = models.ForeignKey("pools.NodeType", on_delete=models.PROTECT)
    gpu_model = models.ForeignKey("pools.GpuModel", on_delete=models.PROTECT)
    monthly_price = models.DecimalField(max_digits=14, decimal_places=2)
    hourly_price = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, default="CNY")
    effective_from = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["gpu_model__name", "node_type__gpu_count", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["node_type", "gpu_model", "effective_from"], name="nodeprice_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.node_type} {self.gpu_model}: {self.monthly_price} {self.currency}/month"


class LeaseTerm(models.Model):
    """How long a lease type runs and the discount it earns (D2: longer lease, bigger discount)."""

    lease_type = models.CharField(max_length=10)
    months = models.PositiveSmallIntegerField()
    discount = models.DecimalField(max_digits=5, decimal_places=4, help_text="0.15 = 15% off")
    effective_from = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["months", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["lease_type", "effective_from"], name="leaseterm_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.lease_type}: {self.months} months, {self.discount:%} off"


class Account(models.Model):
    """The cloud account whose balance pays for orders (T1: an unpaid order stalls a pool)."""

    name = models.CharField(max_length=60, unique=True)
    balance = models.DecimalField(max_digits=16, decimal_places=2)
    currency = models.CharField(max_length=3, default="CNY")

    def __str__(self) -> str:
        return f"{self.name}: {self.balance} {self.currency}"

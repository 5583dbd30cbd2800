"""The price book and the account that orders are paid from (seed C1, design §3).

Prices are versioned by `effective_from`: a change never rewrites what was quoted before it.
Money is Decimal with a currency code.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.functional import cached_property

from pools import roles
from pools.core.spec import LEASE_TYPES

# What the admin may write into the price book and the account (checked by every model form;
# `billing.pricing.quote_for` and the simulated cloud's `pay` check again, for rows written
# before these checks or around the forms). Prices may be 0 (a free tier or an internal
# price) but never negative: a negative price makes an order whose payment credits the account.
NOT_NEGATIVE = MinValueValidator(0, message="Enter 0 or more: a negative price would make orders that pay money into the account.")
# The most a node's price may be: far above any GPU node's in any currency (an 8-GPU node in
# won or rupiah is tens or hundreds of millions a month), low enough that an order of a full pool
# over the longest lease term, a default budget and an hour's metered cost fit their columns.
PRICE_CEILING = MaxValueValidator(
    1_000_000_000, message="Enter at most 1000000000: orders of a full pool at a higher monthly price would not fit the ledger."
)
HOURLY_PRICE_CEILING = MaxValueValidator(
    10_000_000, message="Enter at most 10000000: an hour's cost at a higher price would not fit the ledger."
)
# A discount is a fraction of the list price, 0 (none) to 1 (free, like a price of 0): above 1
# the price turns negative. The same range the preemptible discount always had.
FRACTION = (
    MinValueValidator(0, message="Enter a fraction from 0 to 1, such as 0.15 for 15 percent off."),
    MaxValueValidator(1, message="Enter a fraction from 0 to 1, such as 0.15 for 15 percent off: above 1 the price turns negative."),
)
# ISO 4217's shape: payments compare currencies as text, so "cny" or "Yuan" would never match.
CURRENCY_CODE = RegexValidator(r"^[A-Z]{3}\Z", message="Enter an ISO 4217 currency code: three capital letters, such as CNY or USD.")


class NodePrice(models.Model):
    """Monthly and on-demand hourly price of one node of a type and GPU model."""

    node_type = models.ForeignKey("pools.NodeType", on_delete=models.PROTECT)
    gpu_model = models.ForeignKey("pools.GpuModel", on_delete=models.PROTECT)
    monthly_price = models.DecimalField(max_digits=14, decimal_places=2, validators=[NOT_NEGATIVE, PRICE_CEILING])
    hourly_price = models.DecimalField(max_digits=12, decimal_places=4, validators=[NOT_NEGATIVE, HOURLY_PRICE_CEILING])
    currency = models.CharField(max_length=3, default="CNY", validators=[CURRENCY_CODE])
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


MAX_LEASE_MONTHS = 120


class LeaseTerm(models.Model):
    """How long a lease type runs and the discount it earns (D2: longer lease, bigger discount)."""

    # A pool's spec can only name these (`spec.leaseType`): a term under any other name could
    # never be bought, and an admin who typed "Monthly" would wonder why no pool gets it.
    lease_type = models.CharField(max_length=10, choices=[(name, name.capitalize()) for name in LEASE_TYPES])
    # A lease's end must be a date the controllers can count with: a term of 2**31 months was
    # saved, and every pass over a pool whose order it priced failed for good.
    months = models.PositiveSmallIntegerField(validators=[
        MinValueValidator(1, message="A lease runs at least 1 month."),
        MaxValueValidator(MAX_LEASE_MONTHS, message=f"A lease runs at most {MAX_LEASE_MONTHS} months ({MAX_LEASE_MONTHS // 12} years)."),
    ])  # fmt: skip
    discount = models.DecimalField(max_digits=5, decimal_places=4, validators=list(FRACTION), help_text="0.15 = 15% off")
    preemptible_discount = models.DecimalField(
        max_digits=5, decimal_places=4, null=True, blank=True, validators=list(FRACTION),
        help_text="Off the monthly list price for a preemptible node on this term (0.40 = 40% off); empty: not sold preemptible",
    )  # fmt: skip
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
    # Changed only by payments and by audited adjustments under the row lock
    # (`billing.accounts.account_adjust`): never by saving a form that read it earlier.
    balance = models.DecimalField(max_digits=16, decimal_places=2, validators=[MinValueValidator(0)])
    currency = models.CharField(max_length=3, default="CNY", validators=[CURRENCY_CODE])

    def __str__(self) -> str:
        return f"{self.name}: {self.balance} {self.currency}"


# --------------------------------------------------------------------------- price book extras


class PriceBookEntry(models.Model):
    """A price that is not per node (C1): preemptible discount, storage, network, registry.

    Versioned like `NodePrice`: the entry in force at a moment is the latest `effective_from`
    not after it. A discount is a fraction (0.60 = 60% off the on-demand price).
    """

    class Kind(models.TextChoices):
        PREEMPTIBLE_DISCOUNT = (
            "preemptible_discount",
            "Preemptible discount (fraction off the on-demand price)",
        )
        STORAGE_GB_MONTH = "storage_gb_month", "Storage per GB-month"
        NETWORK_CROSS_ZONE_GB = "network_cross_zone_gb", "Cross-zone network per GB"
        REGISTRY_POOL_MONTH = "registry_pool_month", "Registry / value-added fee per pool-month"

    kind = models.CharField(max_length=30, choices=Kind.choices)
    amount = models.DecimalField(max_digits=14, decimal_places=6, validators=[NOT_NEGATIVE])
    currency = models.CharField(max_length=3, default="CNY", validators=[CURRENCY_CODE])
    effective_from = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "-effective_from"]
        verbose_name_plural = "price book entries"
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "effective_from"], name="pricebookentry_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.price_text} from {self.effective_from:%Y-%m-%d}"

    @property
    def price_text(self) -> str:
        """The discount as a share off (the row's currency is no unit of a fraction), the fees
        as money: "60% off the on-demand price", "500.00 CNY", "0.0035 CNY" as entered."""
        if self.kind == self.Kind.PREEMPTIBLE_DISCOUNT:
            return f"{(self.amount * 100).normalize():f}% off the on-demand price"
        cents = self.amount.quantize(Decimal("0.01"))
        return f"{cents if cents == self.amount else self.amount.normalize():f} {self.currency}"

    def clean(self):
        """The preemptible discount is a fraction like the lease terms' (above 1 the price of a
        preemptible node turns negative); the other kinds are amounts of money."""
        super().clean()
        if self.kind == self.Kind.PREEMPTIBLE_DISCOUNT and self.amount is not None and self.amount > 1:
            raise ValidationError({"amount": FRACTION[1].message})


# --------------------------------------------------------------------------- metering


class CostQuerySet(models.QuerySet):
    """Costs belong to the team they are charged to (a pod's team; the pool owner for idle)."""

    def for_user(self, user):
        if not user.is_authenticated:
            return self.none()
        if roles.sees_all_teams(user):
            return self
        return self.filter(team__in=roles.team_ids(user))


class MeterRun(models.Model):
    """The claim of one metered hour, or of one part of it: inserted in the transaction that
    writes the part's rows, so a second worker (or a rerun) finds it taken and writes nothing
    (no double count). An hour metered in `parts` parts (split by pool over workers: part `i`
    takes the pools whose id is `i` modulo `parts`) is complete when all its parts are in."""

    hour = models.DateTimeField()
    part = models.PositiveSmallIntegerField(default=0)
    parts = models.PositiveSmallIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    node_records = models.PositiveIntegerField(default=0)
    pod_records = models.PositiveIntegerField(default=0)
    cost_records = models.PositiveIntegerField(default=0)
    total = models.DecimalField(max_digits=16, decimal_places=2, default=0)
    guest_fees_by_capacity = models.BooleanField(
        default=True, db_default=False,
        help_text="Whether a team a pool was lent to paid the pool's fees by its share of the pool's GPUs (`allocation.fee_splits`); "
                  "hours metered before that rule split them by GPU-hours used, and the detail export recomputes them so",
    )  # fmt: skip

    class Meta:
        ordering = ["-hour", "part"]
        constraints = [
            models.UniqueConstraint(fields=["hour", "part"], name="meterrun_hour_part"),
            models.CheckConstraint(condition=models.Q(part__lt=models.F("parts")), name="meterrun_part_of_parts"),
        ]

    def __str__(self) -> str:
        part = f" (part {self.part + 1} of {self.parts})" if self.parts > 1 else ""
        return f"metered {self.hour:%Y-%m-%d %H:00}{part}"


class LabelSet(models.Model):
    """One distinct set of effective labels, stored once for every usage record that carries it
    (issue 23): an hour of a 1,000-pool fleet writes ~41,000 usage records with ~4,700 label
    sets, mostly the same as the hour before, and the labels were 60% of the ledger's bytes.
    Its id is its content's (`billing.label_sets.label_set_id`), so every writer names a set
    the same way without asking the database, and sets are never changed or deleted."""

    id = models.UUIDField(primary_key=True)
    labels = models.JSONField()

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.labels.items()) or "(no labels)"


class UsageRecord(models.Model):
    """What one resource used in one hour (design §3): the node-hours of a pool's alike nodes
    with their cost (same billing, price, GPUs and labels: one record, `nodes_billed` names them),
    the GPU-hours by request of a workload's pods on one node (same namespace, team and labels:
    replicas are one record, `pod_count` of them), or a pool fee. Labels are the effective labels
    at metering time, in a shared `LabelSet` (`labels` reads them)."""

    class Kind(models.TextChoices):
        NODE = "node", "Node-hours"
        POD = "pod", "Pod GPU-hours"
        STORAGE = "storage", "Storage fee"
        NETWORK = "network", "Cross-zone network fee"
        REGISTRY = "registry", "Registry fee"
        # A lease period recorded after metering had closed every hour of its lease, its share
        # charged whole in one later hour (`billing.lease_corrections`).
        CORRECTION = "correction", "Lease correction"

    hour = models.DateTimeField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # A workload's name holds its node's: a pod recreated under its own name (a StatefulSet's) on
    # another node in the same hour is a second record (namespace 63 + pod 253 + node 100 + "#n").
    resource = models.CharField(max_length=430, help_text="node name, namespace/pod@node, or pool name")
    # References checked per statement, not per row: migration 0011's triggers (an hour of a
    # 1,000-pool fleet writes ~41,000 rows; read its note before altering this table); the
    # (pool, hour) index serves lookups by pool.
    pool = models.ForeignKey("pools.GpuNodePool", on_delete=models.PROTECT, related_name="+", db_constraint=False, db_index=False)
    team = models.ForeignKey("pools.Team", on_delete=models.PROTECT, related_name="+", db_constraint=False)
    node_name = models.CharField(max_length=100, blank=True)
    # Alike nodes are one record (issue 23: a 1,000-pool fleet bills ~20,000 nodes an hour, ~20 a
    # pool, mostly alike): their quantity, amounts and GPUs summed, their names here in name order.
    node_names = models.TextField(blank=True, default="", help_text="a node record's nodes when more than one, space-separated")
    namespace = models.CharField(max_length=63, blank=True)
    pod_name = models.CharField(
        max_length=253, blank=True, help_text="a pod record's first pod (by name) of its workload"
    )
    pod_count = models.PositiveIntegerField(
        default=0, help_text="pods in a pod record: a workload's replicas on the node"
    )
    billing_kind = models.CharField(max_length=12, blank=True)
    gpu_class = models.CharField(max_length=40, blank=True)
    region = models.CharField(max_length=40, blank=True)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    quantity = models.DecimalField(
        max_digits=18, decimal_places=6, help_text="node-hours, GPU-hours or GB"
    )
    amount = models.DecimalField(max_digits=14, decimal_places=2, default=0)
    list_amount = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, default="CNY")
    # Checked per statement like `pool` and `team` (migration 0015); never looked up by set.
    label_set = models.ForeignKey(LabelSet, on_delete=models.PROTECT, related_name="+", db_constraint=False, db_index=False)

    class Meta:
        ordering = ["hour", "kind", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "kind", "resource"], name="usagerecord_unique_hour_resource"
            )
        ]
        indexes = [models.Index(fields=["pool", "hour"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.kind} {self.resource}: {self.quantity}"

    @property
    def nodes_billed(self) -> list[str]:
        """The names of the nodes a node record bills: its alike nodes, or its one node."""
        return self.names_billed(self.node_name, self.node_names)

    @staticmethod
    def names_billed(node_name: str, node_names: str) -> list[str]:
        """`nodes_billed` from the two columns (for rows read as values)."""
        return node_names.split() if node_names else [node_name]

    @cached_property
    def labels(self) -> dict:
        """The record's effective labels (select `label_set` with many records). Metering gives
        its records theirs as it builds them: read ~40,000 times an hour, not through the
        relation each time."""
        return self.label_set.labels


class CostRecord(models.Model):
    """One hour's money per pool, charged team, namespace, labels, GPU class, billing kind,
    cost kind and component: the allocation core's rows for the hour
    (`billing.allocation.allocate_hour`, per node and workload) summed exactly by
    `billing.services.cost_records_for`. What chargeback groups by is all here; which node or
    pod a cent came from is in the usage records, from which the FOCUS export recomputes the
    same split. An hour of a 1,000-pool fleet is then ~7,000 rows, not ~450,000 (issue 9)."""

    class CostKind(models.TextChoices):
        USAGE = "usage", "Usage"
        IDLE = "idle", "Idle"
        FEE = "fee", "Fee"

    hour = models.DateTimeField()
    # No single-column indexes: the (pool, hour) and (team, hour) indexes below lead with them
    # and serve every lookup by pool or team (an hour writes ~7,000 rows into each index kept).
    # References checked per statement on PostgreSQL, as the usage rows': migration 0014.
    pool = models.ForeignKey("pools.GpuNodePool", on_delete=models.PROTECT, related_name="+", db_constraint=False, db_index=False)
    team = models.ForeignKey(
        "pools.Team", on_delete=models.PROTECT, related_name="+", help_text="Who is charged", db_constraint=False, db_index=False
    )
    namespace = models.CharField(max_length=63, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    gpu_class = models.CharField(max_length=40, blank=True)
    billing_kind = models.CharField(max_length=12)
    cost_kind = models.CharField(max_length=5, choices=CostKind.choices)
    component = models.CharField(max_length=10, default="gpu")
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3, default="CNY")

    objects = CostQuerySet.as_manager()

    class Meta:
        ordering = ["hour", "id"]
        indexes = [
            models.Index(fields=["hour"]),
            models.Index(fields=["team", "hour"]),
            models.Index(fields=["pool", "hour"]),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.cost_kind} {self.pool_id}: {self.amount} {self.currency}"


class CostDay(models.Model):
    """Cost records of one day summed per (pool, charged team, namespace, labels, billing kind,
    cost kind): what chargeback reads. Each metered hour adds its groups to its day's rows in
    the transaction that writes the hour's records (`billing.services.cost_day_add`), so the
    sums are the records' sums exactly; `cost_day_rebuild` recomputes a day from its records.
    A month of a 10,000-pod fleet is then ~30 × (distinct label sets) rows instead of 7.2 M."""

    day = models.DateField()
    pool = models.ForeignKey("pools.GpuNodePool", on_delete=models.PROTECT, related_name="+")
    # No index of its own: the (team, day) index leads with it.
    team = models.ForeignKey("pools.Team", on_delete=models.PROTECT, related_name="+", db_index=False)
    namespace = models.CharField(max_length=63, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    billing_kind = models.CharField(max_length=12)
    cost_kind = models.CharField(max_length=5)
    currency = models.CharField(max_length=3, default="CNY")
    gpu_hours = models.DecimalField(max_digits=20, decimal_places=6, default=0)
    amount = models.DecimalField(max_digits=16, decimal_places=2)

    objects = CostQuerySet.as_manager()

    class Meta:
        ordering = ["day", "id"]
        indexes = [models.Index(fields=["day"]), models.Index(fields=["team", "day"])]

    def __str__(self) -> str:
        return f"{self.day} {self.cost_kind} {self.pool_id}: {self.amount} {self.currency}"


class CostDayLock(models.Model):
    """One row per day, locked while an hour is added to that day's rollup or the day is
    rebuilt (two hours of one day metered by two workers add one after the other). SQLite's
    only: PostgreSQL takes advisory locks instead (`billing.services._day_locked`)."""

    day = models.DateField(primary_key=True)

    def __str__(self) -> str:
        return str(self.day)


# --------------------------------------------------------------------------- budgets


def _default_thresholds() -> list[int]:
    return [80, 100]


class Budget(models.Model):
    """A monthly budget of a pool or of a team (seed T6, O1).

    Every live pool has one (`billing.budget_sync`): finance's `override_amount` if set, else
    `spec.budget.monthly`, else the default computed from the price book
    (`billing.budget_default`); `source` says which, so pages can say where it comes from. A
    team budget is set by finance or an admin (`source` finance)."""

    class Source(models.TextChoices):
        DEFAULT = "default", "Default (subscription fee, on-demand headroom and registry fee)"
        SPEC = "spec", "Set in the pool's spec"
        FINANCE = "finance", "Set by finance"

    pool = models.OneToOneField(
        "pools.GpuNodePool", null=True, blank=True, on_delete=models.CASCADE, related_name="budget"
    )
    team = models.ForeignKey(
        "pools.Team",
        on_delete=models.CASCADE,
        related_name="budgets",
        help_text="The pool's team, or the budgeted team",
    )
    monthly_amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3, default="CNY")
    thresholds = models.JSONField(
        default=_default_thresholds, help_text="Percentages, e.g. [80, 100]"
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.SPEC)
    override_amount = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        help_text="A pool's budget as finance set it; it wins over the spec and the default",
    )  # fmt: skip
    default_amount = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        help_text="A pool's default budget from the price book (shown even when overridden)",
    )  # fmt: skip
    default_note = models.CharField(max_length=300, blank=True, help_text="How the default was computed")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = CostQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "pool__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team"],
                condition=models.Q(pool__isnull=True),
                name="budget_unique_team_budget",
            )
        ]

    def __str__(self) -> str:
        scope = f"pool {self.pool.name}" if self.pool_id else f"team {self.team.slug}"
        return f"{scope}: {self.monthly_amount} {self.currency}/month"


class BudgetAlert(models.Model):
    """A threshold crossed in a period; the unique constraint makes it fire at most once. Who
    was told and how is its `pools.Notification` (key `budget-alert:<id>`)."""

    class Basis(models.TextChoices):
        ACTUAL = "actual", "Actual"
        FORECAST = "forecast", "Forecast"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period = models.DateField(help_text="First day of the budget month")
    threshold = models.PositiveSmallIntegerField()
    basis = models.CharField(max_length=8, choices=Basis.choices)
    amount = models.DecimalField(
        max_digits=16, decimal_places=2, help_text="Spend (or forecast) when it fired"
    )
    budget_amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3, default="CNY")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period", "threshold", "basis"],
                name="budgetalert_once_per_period",
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget}: {self.basis} {self.threshold}% in {self.period:%Y-%m}"

    @property
    def notification_key(self) -> str:
        """The key of the `pools.Notification` that tells of it."""
        return f"budget-alert:{self.pk}"


class PoolResourceSample(models.Model):
    """Storage held and cross-zone traffic of a pool in one hour (D4, C1), as reported by the
    provider (or an agent); metering turns them into storage and network fees."""

    pool = models.ForeignKey("pools.GpuNodePool", on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    storage_gb = models.DecimalField(max_digits=14, decimal_places=3, default=0)
    cross_zone_gb = models.DecimalField(max_digits=14, decimal_places=3, default=0)

    class Meta:
        ordering = ["pool", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "hour"], name="poolresourcesample_unique_hour")
        ]

    def __str__(self) -> str:
        return f"{self.pool_id} {self.hour:%Y-%m-%d %H:00}: {self.storage_gb} GB, {self.cross_zone_gb} GB cross-zone"


class LeasePeriod(models.Model):
    """A node's share of a paid lease (seed D2, C1) and the hours the node holds it.

    An order of n nodes for m months debits one amount; each of its slots is charged back its
    share (`billing.lease_costs.split_amount`), spread over the hours of [lease_start, lease_end)
    (`spread_hour_cost`), so the hourly charges of a slot add up to what was debited for it to
    the cent. A renewal adds the next period. A replacement node (a reclaimed preemptible node,
    a repaired one) takes the slot over: the vacated holder's row ends at the hour the successor
    starts (`held_to`) and the successor's row starts there, with the same payment and spread,
    so every hour of the lease is charged exactly once. The hours a holder is gone and no
    successor has the slot stay on the holder: idle, shown as unused commitment in FOCUS.
    A period recorded after metering had closed every hour of its lease has `charged_in`:
    its share is charged whole in that hour instead (`billing.lease_corrections`).
    """

    node = models.ForeignKey("pools.Node", on_delete=models.CASCADE, related_name="lease_periods")
    order = models.ForeignKey("pools.PoolOrder", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The order that paid it")
    slot = models.PositiveSmallIntegerField(default=0, help_text="Which of the order's node slots (its share of the debit)")
    amount = models.DecimalField(max_digits=14, decimal_places=2, help_text="This slot's share of the order's debit")
    currency = models.CharField(max_length=3, default="CNY")
    lease_start = models.DateTimeField()
    lease_end = models.DateTimeField()
    held_from = models.DateTimeField(help_text="First hour this node holds the slot (hour-aligned)")
    held_to = models.DateTimeField(null=True, blank=True, help_text="Hour its successor takes the slot over; empty: to the lease end")
    charged_in = models.DateTimeField(
        null=True, blank=True,
        help_text="Hour its whole share is charged in, as a correction: it was recorded after every hour of its lease was metered; "
        "empty: charged over its lease's hours",
    )  # fmt: skip

    class Meta:
        ordering = ["node", "lease_start", "held_from"]
        indexes = [
            models.Index(fields=["node", "lease_end"]),
            # Metering looks for an hour's corrections every hour; they are few.
            models.Index(fields=["charged_in"], condition=models.Q(charged_in__isnull=False), name="leaseperiod_charged_in"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.lease_start:%Y-%m-%d}..{self.lease_end:%Y-%m-%d}: {self.amount} {self.currency}"

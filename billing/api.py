"""`GET /api/v1/costs/`: chargeback as JSON, CSV or FOCUS 1.2, streamed (issue 7 §4, §5).

    /api/v1/costs/?by=team,project,gpu-class&from=2026-12-01&to=2026-12-31&format=csv

`format`: `json` (default) the grouped rows with totals per currency (`CostsSerializer`: never
one currency added to another); `csv` the same rows (the page's CSV
button), with the same columns (`billing.allocation.group_columns`: charged team, label keys,
namespace, billing, kind, status, amount, currency) and the hours not metered yet as `accruing`
rows (`billing.chargeback`); `csv` with `detail=1` every cost record; `focus` the FOCUS 1.2 dataset from the cost
records (`billing.focus_records`; `granularity=daily` by default, or `hourly`: a row per cost
record), and with `detail=1` per node and workload, the allocation recomputed hour by hour. CSV and FOCUS are `StreamingHttpResponse`s written in
lines or chunks of lines, so memory stays constant however long the range. Finance and admins get every team; leads and members their teams' costs.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import chargeback, focus_selectors, selectors
from billing.focus import FOCUS_COLUMNS, iter_csv_lines
from pools.core.errors import ValidationError, query_flag

FORMATS = ("json", "csv", "focus")


class IgnoreFormatParameter(DefaultContentNegotiation):
    """`?format=csv|focus` selects our export, not a DRF renderer: always answer with the first."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def month_to_date(now: datetime | None = None):
    today = (now or datetime.now(UTC)).date()
    return today.replace(day=1), today


def parse_query(params, *, user, now: datetime | None = None) -> selectors.CostQuery:
    """The query of `params` for `user`; a pool they may not filter by is refused as unknown."""
    start, end = month_to_date(now)
    query = selectors.cost_query_parse(params, default_start=start, default_end=end)
    selectors.cost_pool_require(user=user, query=query)
    return query


def csv_response(lines, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def export_name(query: selectors.CostQuery, kind: str) -> str:
    return f"costs-{kind}-{query.start or 'start'}-{query.end or 'end'}.csv"


MONEY = "An exact decimal amount, as a string"


class CurrencyTotalSerializer(serializers.Serializer):
    """The totals of the rows charged in one currency."""

    currency = serializers.CharField(help_text="ISO 4217 code, as in the rows")
    total = serializers.CharField(help_text=f"{MONEY}: every row in this currency, accruing ones included")
    idle = serializers.CharField(help_text=f"{MONEY}: the idle rows in this currency")
    accruing = serializers.CharField(help_text=f"{MONEY}: the accruing rows (not metered yet) in this currency")
    idleShare = serializers.CharField(help_text="Idle as a percentage of this currency's total, one decimal")


SEVERAL = "; null when the rows are in several currencies (read `totals`)"


class CostsSerializer(serializers.Serializer):
    """The JSON answer (format=json): the grouped rows and their totals. Amounts in different
    currencies are never added together: `totals` has one entry per currency; `total`, `idle`,
    `accruing`, `idleShare` and `currency` repeat its single entry when there is one currency
    (zero in the default currency when there are no rows) and are null when there are several."""

    # `from` is a keyword: the field is declared under another name and renamed in the schema.
    from_ = serializers.DateField(help_text="First day (UTC)")
    to = serializers.DateField(help_text="Last day (UTC, inclusive)")
    by = serializers.ListField(child=serializers.CharField(), help_text="The grouping label keys")
    columns = serializers.ListField(child=serializers.CharField(), help_text="The keys of each row, in order")
    rows = serializers.ListField(child=serializers.DictField(child=serializers.CharField()),
                                 help_text="One per group: the columns' values, `amount` and `currency` included")  # fmt: skip
    totals = CurrencyTotalSerializer(many=True, help_text="One per currency charged, by currency code; empty without rows")
    total = serializers.CharField(allow_null=True, help_text=f"{MONEY}: every row{SEVERAL}")
    idle = serializers.CharField(allow_null=True, help_text=f"{MONEY}: the idle rows{SEVERAL}")
    accruing = serializers.CharField(allow_null=True, help_text=f"{MONEY}: the rows not metered yet{SEVERAL}")
    idleShare = serializers.CharField(allow_null=True, help_text=f"Idle as a percentage of the total{SEVERAL}")
    currency = serializers.CharField(allow_null=True, help_text=f"The rows' currency (ISO 4217){SEVERAL}")

    def get_fields(self):
        return {("from" if name == "from_" else name): field for name, field in super().get_fields().items()}


def costs_json(query: selectors.CostQuery, groups) -> dict:
    """The JSON answer's body (`CostsSerializer` documents it), from the grouped rows."""
    summary = chargeback.summarize(groups)

    def text(value):
        return None if value is None else str(value)

    return {
        "from": query.start,
        "to": query.end,
        "by": list(query.by),
        "columns": list(query.columns),
        "rows": list(chargeback.group_dicts(groups)),
        "totals": [
            {"currency": t.currency, "total": str(t.total), "idle": str(t.idle), "accruing": str(t.accruing),
             "idleShare": str(t.idle_share)}
            for t in summary.by_currency
        ],  # fmt: skip
        "total": text(summary.total),
        "idle": text(summary.idle),
        "accruing": text(summary.accruing),
        "idleShare": text(summary.idle_share),
        "currency": summary.currency,
    }


class CostsView(APIView):
    content_negotiation_class = IgnoreFormatParameter

    @extend_schema(
        summary="Chargeback by label keys and namespace (JSON, CSV or FOCUS 1.2)",
        parameters=[
            OpenApiParameter(
                "by",
                str,
                description=(
                    "Comma-separated label keys, verbatim (default team,project,gpu-class), at most 8, each once; "
                    "`namespace` groups by namespace; charged_team, kind, status, amount and currency are columns of every report, not label keys"
                ),
            ),
            OpenApiParameter(
                "from",
                OpenApiTypes.DATE,
                description="First day (UTC, 2000-01-01 to 2999-12-31), default the 1st of this month",
            ),
            OpenApiParameter(
                "to", OpenApiTypes.DATE, description="Last day (UTC, inclusive, 2000-01-01 to 2999-12-31), default today"
            ),
            OpenApiParameter(
                "format", str, enum=list(FORMATS), description="json (default), csv or focus"
            ),
            OpenApiParameter(
                "detail", bool, description="With format=csv: every cost record instead of groups; with "
                "format=focus: a row per node and workload instead of per cost record"
            ),
            OpenApiParameter(
                "granularity",
                str,
                enum=list(focus_selectors.FOCUS_GRANULARITIES),
                description="With format=focus: a usage row per cost record summed per day "
                "(default) or per hour",
            ),
            OpenApiParameter("team", str),
            OpenApiParameter("pool", str),
            OpenApiParameter("billing", str, enum=["monthly", "on_demand", "preemptible"]),
            OpenApiParameter(
                "namespace", bool, description="Group by namespace too (default true)"
            ),
            OpenApiParameter(
                "sort", str, description="A column, - for descending (default -amount)"
            ),
        ],
        responses={
            (200, "application/json"): CostsSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            400: OpenApiTypes.OBJECT,
            401: OpenApiTypes.OBJECT,
        },
    )
    def get(self, request):
        fmt = request.query_params.get("format", "json")
        if fmt not in FORMATS:
            raise ValidationError(f"must be one of {', '.join(FORMATS)}", field="format")
        now = timezone.now()
        query = parse_query(request.query_params, user=request.user, now=now)
        user = request.user
        detail = query_flag(request.query_params, "detail")
        if fmt == "focus" and detail:
            rows = focus_selectors.focus_rows_for_user(user=user, query=query)
            return csv_response(
                iter_csv_lines(rows, FOCUS_COLUMNS), export_name(query, "focus-detail")
            )
        if fmt == "focus":
            granularity = request.query_params.get("granularity") or "daily"
            if granularity not in focus_selectors.FOCUS_GRANULARITIES:
                raise ValidationError("must be daily or hourly", field="granularity")
            rows = focus_selectors.focus_csv_for_user(user=user, query=query, granularity=granularity)
            return csv_response(rows, export_name(query, f"focus-{granularity}"))
        if fmt == "csv" and detail:
            rows = selectors.cost_detail_rows(user=user, query=query)
            return csv_response(
                iter_csv_lines(rows, selectors.DETAIL_COLUMNS), export_name(query, "detail")
            )
        accruing = chargeback.accruing_costs(user=user, query=query, now=now)
        groups = chargeback.chargeback(user=user, query=query, accruing=accruing)
        if fmt == "csv":
            lines = iter_csv_lines(chargeback.group_dicts(groups), query.columns)
            return csv_response(
                lines, export_name(query, "by-" + "-".join(query.by or ("namespace",)))
            )
        return Response(costs_json(query, groups))

from django.contrib import admin
from django.db import router, transaction

from billing.models import Account, Budget, BudgetAlert, LeaseTerm, NodePrice, PriceBookEntry
from pools.services.audit import audit_record, snapshot


class AuditedPriceAdmin(admin.ModelAdmin):
    """People change prices here (the demo seed aside), and every change is in the audit log
    (issue #9 item 4): `price.create`, `price.update` (skipped when nothing changed),
    `price.delete`, with the row before and after, both read from the database so that 12.5 and
    12.50 compare equal. Django's admin runs save and delete views in a transaction, so the
    entry and the change commit together; the bulk delete action gets one of its own."""

    def save_model(self, request, obj, form, change):
        before = snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        after = snapshot(type(obj).objects.get(pk=obj.pk))
        if before != after:
            audit_record(actor=request.user, action="price.update" if change else "price.create", obj=obj, before=before, after=after)

    def delete_model(self, request, obj):
        audit_record(actor=request.user, action="price.delete", obj=obj, before=snapshot(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic(using=router.db_for_write(self.model)):
            for obj in queryset:
                audit_record(actor=request.user, action="price.delete", obj=obj, before=snapshot(obj))
            super().delete_queryset(request, queryset)


@admin.register(NodePrice)
class NodePriceAdmin(AuditedPriceAdmin):
    list_display = ("node_type", "gpu_model", "monthly_price", "hourly_price", "currency", "effective_from")
    list_filter = ("gpu_model", "node_type")


@admin.register(LeaseTerm)
class LeaseTermAdmin(AuditedPriceAdmin):
    list_display = ("lease_type", "months", "discount", "preemptible_discount", "effective_from")


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ("name", "balance", "currency")


@admin.register(PriceBookEntry)
class PriceBookEntryAdmin(AuditedPriceAdmin):
    list_display = [f.name for f in PriceBookEntry._meta.fields if f.name != "id"]


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = [f.name for f in Budget._meta.fields if f.name != "id"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(admin.ModelAdmin):
    list_display = [f.name for f in BudgetAlert._meta.fields if f.name != "id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

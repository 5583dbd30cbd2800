from django.contrib import admin

from billing.models import Account, LeaseTerm, NodePrice


@admin.register(NodePrice)
class NodePriceAdmin(admin.ModelAdmin):
    list_display = ("node_type", "gpu_model", "monthly_price", "hourly_price", "currency", "effective_from")
    list_filter = ("gpu_model", "node_type")


@admin.register(LeaseTerm)
class LeaseTermAdmin(admin.ModelAdmin):
    list_display = ("lease_type", "months", "discount", "effective_from")


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ("name", "balance", "currency")

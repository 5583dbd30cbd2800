from django.contrib import admin

from billing.models import Account, Budget, BudgetAlert, LeaseTerm, NodePrice, PriceBookEntry


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


@admin.register(PriceBookEntry)
class PriceBookEntryAdmin(admin.ModelAdmin):
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

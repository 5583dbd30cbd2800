"""What the Django admin's catalog pages (prices, lease terms, quotas, the account) share: every
change is in the audit log, and numbers are read as the rest of the product reads them.

The admin is where platform admins decide what orders are checked and priced against, so its
changes are audited like the decisions made elsewhere (`price.*`, `quota.*`). Its number
fields refuse other scripts' digits (`١٢٣`), which Django's own fields read as 123, as the web
forms, the API and the CLI do (`pools.views.form_fields`). A refused change's page is headed
with the row as saved, not the values refused (`SavedHeadingAdmin`).
"""

from __future__ import annotations

from django.contrib import admin
from django.db import models, router, transaction

from pools.services.audit import audit_record, snapshot
from pools.views import form_fields

# Keyed by the model field class: the admin looks the overrides up along the field's MRO, so
# PositiveIntegerField and friends take the IntegerField entry.
ASCII_NUMBER_FIELDS = {
    models.DecimalField: {"form_class": form_fields.DecimalField},
    models.IntegerField: {"form_class": form_fields.IntegerField},
}


class SavedHeadingAdmin(admin.ModelAdmin):
    """A refused change shows the row as saved in its heading, page title and breadcrumbs, not
    the values just refused: Django's change view names the page after the instance, which the
    form has already changed to what was entered ("GPU_8_CARD A100_80G: -1 CNY/month")."""

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if change and request.method == "POST" and obj is not None and obj.pk is not None:
            saved = type(obj)._default_manager.filter(pk=obj.pk).first()
            if saved is not None:  # else deleted meanwhile: the page as Django shows it
                context.update(subtitle=str(saved), original=saved)
                obj = saved
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


class AuditedModelAdmin(SavedHeadingAdmin):
    """Every change is in the audit log as `<audit_prefix>.create`, `.update` (skipped when
    nothing changed) and `.delete`, with the row before and after, both read from the database
    so that 12.5 and 12.50 compare equal. Django's admin runs save and delete views in a
    transaction, so the entry and the change commit together; the bulk delete action gets one
    of its own."""

    audit_prefix = ""
    formfield_overrides = ASCII_NUMBER_FIELDS

    def save_model(self, request, obj, form, change):
        before = snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        after = snapshot(type(obj).objects.get(pk=obj.pk))
        if before != after:
            action = f"{self.audit_prefix}.{'update' if change else 'create'}"
            audit_record(actor=request.user, action=action, obj=obj, before=before, after=after)

    def delete_model(self, request, obj):
        audit_record(actor=request.user, action=f"{self.audit_prefix}.delete", obj=obj, before=snapshot(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic(using=router.db_for_write(self.model)):
            for obj in queryset:
                audit_record(actor=request.user, action=f"{self.audit_prefix}.delete", obj=obj, before=snapshot(obj))
            super().delete_queryset(request, queryset)


class ViewOnlyAdmin(admin.ModelAdmin):
    """Rows that change only through the product's services, shown but never edited here.

    An order approved in the admin was paid and provisioned with no audit entry, no
    `OrderApproved` event and none of the approval's checks; a node, a pool, an event, a budget,
    an Xid or an agent command edited here would skip the same (found by a QA sweep). Each has
    its own page and action that check, audit and record it: the orders' Approve and Reject,
    the budgets page, the pool's YAML, the repair pages."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


from django import forms
from django.contrib import admin
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.db import transaction
from django.utils.translation import gettext_lazy

from pools import roles
from pools.core.namespaces import reserved_reason
from pools.core.priority import INT32_MAX
from pools.models import (
    AuditEntry,
    GpuModel,
    GpuNodePool,
    Membership,
    NamespaceTeam,
    Node,
    NodeType,
    PoolEvent,
    PoolOrder,
    PriorityClass,
    Quota,
    Team,
    Zone,
)
from pools.providers import real_cluster
from pools.selectors.namespaces import (
    mapping_removal_problem,
    namespace_holdings,
    team_slug_problem,
)
from pools.services.namespaces import namespace_lock
from pools.views.admin_audit import AuditedModelAdmin, SavedHeadingAdmin, ViewOnlyAdmin


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


def _sentence(text: str) -> str:
    """A message of the core or a selector (lower-case, no stop) as the admin shows one."""
    return text[:1].upper() + text[1:] + "."


class TeamForm(forms.ModelForm):
    """A team's slug is its namespace: one Kubernetes keeps for itself, or one another team
    already holds (its pods or an admin's mapping claimed it), is refused beside the slug and
    nothing is saved. Refusing, rather than handing the namespace over, never moves another
    team's pods, budgets and bills. Only a new or changed slug is checked, so a team still
    saves while an older mapping of its slug is being sorted out. The check runs under the
    namespace's lock, in the admin's transaction that saves the team, so a pod claiming the
    namespace at the same moment either came first (and is named here) or waits and is refused."""

    def clean_slug(self):
        slug = self.cleaned_data["slug"]
        if self.instance.pk is None or slug != self.instance.slug:
            namespace_lock(slug, *([self.instance.slug] if self.instance.pk is not None else []))
            if problem := team_slug_problem(slug, team_id=self.instance.pk):
                raise forms.ValidationError(_sentence(problem))
        return slug


@admin.register(Team)
class TeamAdmin(SavedHeadingAdmin):
    form = TeamForm
    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]

    def get_deleted_objects(self, objs, request):
        """A team deleted takes its budgets and their alerts with it, as before they were
        view-only here: only a direct edit of those needs their services, not the team's
        cascade (found by review)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        view_only = {model._meta.verbose_name for model, model_admin in self.admin_site._registry.items() if isinstance(model_admin, ViewOnlyAdmin)}
        return deleted, counts, perms_needed - view_only, protected

    def save_model(self, request, obj, form, change):
        """A renamed team keeps the namespace of its old slug while it has pods or budgets there:
        the old slug is mapped to it (under the lock `clean_slug` took, in the admin's
        transaction), so another team's first pod cannot claim the namespace its pods run in."""
        old = form.initial.get("slug") if change else None
        super().save_model(request, obj, form, change)
        if old and old != obj.slug and any(namespace_holdings(old, obj.pk)):
            NamespaceTeam.objects.get_or_create(namespace=old, defaults={"team": obj})


def _removal_problems(mappings) -> list[str]:
    """Why each of `mappings` cannot be removed or pointed elsewhere, checked under their
    namespaces' locks (until the admin's transaction ends). Only where the control plane hosts
    the pods: a real cluster's pods are mirrored with their namespace's team, so there a
    mapping changed or removed moves them with it (the admins' way to reassign a namespace)."""
    if real_cluster():
        return []
    mappings = list(mappings)
    namespace_lock(*(mapping.namespace for mapping in mappings))
    return [_sentence(problem) for mapping in mappings if (problem := mapping_removal_problem(mapping.namespace, mapping.team))]


class NamespaceTeamForm(forms.ModelForm):
    """The same rule as the pods' claims: Kubernetes' own namespaces are no team's, and a team's
    slug is that team's namespace, never another's. A mapping whose team still has pods or
    budgets in its namespace keeps its namespace and team (`_removal_problems`)."""

    def clean(self):
        cleaned = super().clean()
        namespace, team = cleaned.get("namespace"), cleaned.get("team")
        old = self.instance if self.instance.pk is not None else None
        if namespace:
            namespace_lock(namespace, *([old.namespace] if old else []))
        if namespace and (reason := reserved_reason(namespace)):
            self.add_error("namespace", _sentence(reason))
        elif namespace and team and (named := Team.objects.filter(slug=namespace).exclude(pk=team.pk).first()):
            self.add_error("namespace", f"Namespace {namespace!r} is the own namespace of team {named.slug!r} (a team's slug is its namespace); it cannot be mapped to team {team.slug!r}.")
        elif old and namespace and team and (namespace, team.pk) != (old.namespace, old.team_id):
            for problem in _removal_problems([old]):
                self.add_error("team" if namespace == old.namespace else "namespace", problem)
        return cleaned


@admin.action(permissions=["delete"], description=gettext_lazy("Delete selected %(verbose_name_plural)s"))
def delete_selected(modeladmin, request, queryset):
    """Django's own bulk delete in one transaction, as its delete page is: the mappings' check
    (`get_deleted_objects`) and their deletion then happen under the same namespace locks."""
    with transaction.atomic():
        return django_delete_selected(modeladmin, request, queryset)


@admin.register(NamespaceTeam)
class NamespaceTeamAdmin(admin.ModelAdmin):
    """Which team owns a real cluster's namespace (wins over the namespace's ebcloud.io/team
    label); the pod mirror applies a change within a minute."""

    form = NamespaceTeamForm
    actions = [delete_selected]
    list_display = ("namespace", "team", "created_at")
    list_filter = ("team",)
    list_select_related = ("team",)
    search_fields = ("namespace",)

    def get_deleted_objects(self, objs, request):
        """Django's delete-protection page: a mapping whose team still has pods or budgets in its
        namespace is listed as protected, with how many and what to do, and is not deleted."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, perms_needed, [*protected, *_removal_problems(objs)]


class QuotaForm(forms.ModelForm):
    """A quota counts the GPUs of the pools whose zone is in its region: a region no zone names
    (a zone's own name, `cn-east-2a`, is the usual slip) limits nothing, silently. So the
    region is picked from the zones' regions (the one stored kept, should its zones be gone),
    and one sent around the list is refused, naming them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        regions = set(Zone.objects.values_list("region", flat=True)) | ({self.instance.region} if self.instance.region else set())
        self.fields["region"].widget = forms.Select(choices=[("", "---------"), *((r, r) for r in sorted(regions))])

    def clean_region(self):
        region = self.cleaned_data["region"]
        regions = sorted(set(Zone.objects.values_list("region", flat=True)))
        if region not in regions:
            hint = f" It is the name of a zone of {zone.region}." if (zone := Zone.objects.filter(name=region).first()) else ""
            raise forms.ValidationError(f"No zone is in a region named {region!r}, so this quota would limit no pool.{hint} Regions: {', '.join(regions) or 'none yet'}.")
        return region

    def clean_limit_gpus(self):
        limit = self.cleaned_data["limit_gpus"]
        if limit is not None and limit > INT32_MAX:  # what PostgreSQL's integer column holds
            raise forms.ValidationError(f"Enter at most {INT32_MAX} GPUs.")
        return limit


@admin.register(Quota)
class QuotaAdmin(AuditedModelAdmin):
    """Quotas are checked before every order: their changes are audited (`quota.create`,
    `quota.update`, `quota.delete`, with the row before and after) as prices are."""

    audit_prefix = "quota"
    form = QuotaForm
    list_display = ("region", "gpu_model", "team", "limit_gpus")
    list_filter = ("region", "gpu_model")


@admin.register(GpuNodePool)
class GpuNodePoolAdmin(ViewOnlyAdmin):
    list_display = ("name", "team", "gpu_model", "node_type", "zone", "min_nodes", "max_nodes", "phase")
    list_filter = ("phase", "gpu_model", "team")
    list_select_related = ("team", "gpu_model", "node_type", "zone")
    search_fields = ("name",)
    readonly_fields = ("document", "generation", "observed_generation", "created_at", "updated_at", "deleted_at")


@admin.register(PoolOrder)
class PoolOrderAdmin(ViewOnlyAdmin):
    list_display = ("id", "pool", "kind", "status", "node_count", "amount", "currency", "created_at", "decided_by")
    list_filter = ("status", "kind")
    list_select_related = ("pool", "decided_by")


@admin.register(Node)
class NodeAdmin(ViewOnlyAdmin):
    list_display = ("name", "pool", "phase", "billing", "zone", "gpu_count", "lease_end")
    list_filter = ("phase", "billing")
    list_select_related = ("pool", "zone")


@admin.register(PoolEvent)
class PoolEventAdmin(ViewOnlyAdmin):
    list_display = ("last_timestamp", "pool", "type", "reason", "count", "message")
    list_filter = ("type", "reason")
    list_select_related = ("pool",)


@admin.register(AuditEntry)
class AuditEntryAdmin(ViewOnlyAdmin):
    list_display = ("at", "actor", "action", "object_type", "object_id")
    list_filter = ("action",)
    readonly_fields = ("at", "actor", "action", "object_type", "object_id", "before", "after")


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    """User PriorityClasses; the system ones are built in. As in Kubernetes, value and
    preemption policy are fixed once created (delete and create again to change them)."""

    list_display = ("name", "value", "preemption_policy", "global_default", "description")
    list_filter = ("preemption_policy", "global_default")
    search_fields = ("name",)

    def get_readonly_fields(self, request, obj=None):
        return ("name", "value", "preemption_policy", "created_at") if obj is not None else ("created_at",)

    # On a real cluster the classes are the cluster's objects (mirrored each pass): changed
    # with kubectl there, shown here.
    def has_add_permission(self, request):
        return not real_cluster() and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None):
        return not real_cluster() and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not real_cluster() and super().has_delete_permission(request, obj)


admin.site.register([GpuModel, NodeType, Zone], SavedHeadingAdmin)


def _platform_admins_only(request) -> bool:
    """The admin site is for platform admins (superusers or the `platform-admin` group)."""
    return request.user.is_active and roles.is_admin(request.user)


admin.site.has_permission = _platform_admins_only
admin.site.site_header = "EBCloud node pools administration"

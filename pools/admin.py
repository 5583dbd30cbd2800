from django import forms
from django.contrib import admin

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
from pools.selectors.namespaces import team_slug_problem
from pools.views.admin_audit import AuditedModelAdmin


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
    saves while an older mapping of its slug is being sorted out."""

    def clean_slug(self):
        slug = self.cleaned_data["slug"]
        if self.instance.pk is None or slug != self.instance.slug:
            if problem := team_slug_problem(slug, team_id=self.instance.pk):
                raise forms.ValidationError(_sentence(problem))
        return slug


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    form = TeamForm
    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]


class NamespaceTeamForm(forms.ModelForm):
    """The same rule as the pods' claims: Kubernetes' own namespaces are no team's, and a team's
    slug is that team's namespace, never another's."""

    def clean(self):
        cleaned = super().clean()
        namespace, team = cleaned.get("namespace"), cleaned.get("team")
        if namespace and (reason := reserved_reason(namespace)):
            self.add_error("namespace", _sentence(reason))
        elif namespace and team and (named := Team.objects.filter(slug=namespace).exclude(pk=team.pk).first()):
            self.add_error("namespace", f"Namespace {namespace!r} is the own namespace of team {named.slug!r} (a team's slug is its namespace); it cannot be mapped to team {team.slug!r}.")
        return cleaned


@admin.register(NamespaceTeam)
class NamespaceTeamAdmin(admin.ModelAdmin):
    """Which team owns a real cluster's namespace (wins over the namespace's ebcloud.io/team
    label); the pod mirror applies a change within a minute."""

    form = NamespaceTeamForm
    list_display = ("namespace", "team", "created_at")
    list_filter = ("team",)
    search_fields = ("namespace",)


class QuotaForm(forms.ModelForm):
    """A quota counts the GPUs of the pools whose zone is in its region: a region no zone names
    (a zone's own name, `cn-east-2a`, is the usual slip) limits nothing, silently."""

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
class GpuNodePoolAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "gpu_model", "node_type", "zone", "min_nodes", "max_nodes", "phase")
    list_filter = ("phase", "gpu_model", "team")
    list_select_related = ("team", "gpu_model", "node_type", "zone")
    search_fields = ("name",)
    readonly_fields = ("document", "generation", "observed_generation", "created_at", "updated_at", "deleted_at")


@admin.register(PoolOrder)
class PoolOrderAdmin(admin.ModelAdmin):
    list_display = ("id", "pool", "kind", "status", "node_count", "amount", "currency", "created_at", "decided_by")
    list_filter = ("status", "kind")
    list_select_related = ("pool", "decided_by")


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "pool", "phase", "billing", "zone", "gpu_count", "lease_end")
    list_filter = ("phase", "billing")
    list_select_related = ("pool", "zone")


@admin.register(PoolEvent)
class PoolEventAdmin(admin.ModelAdmin):
    list_display = ("last_timestamp", "pool", "type", "reason", "count", "message")
    list_filter = ("type", "reason")
    list_select_related = ("pool",)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("at", "actor", "action", "object_type", "object_id")
    list_filter = ("action",)
    readonly_fields = ("at", "actor", "action", "object_type", "object_id", "before", "after")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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


admin.site.register([GpuModel, NodeType, Zone])


def _platform_admins_only(request) -> bool:
    """The admin site is for platform admins (superusers or the `platform-admin` group)."""
    return request.user.is_active and roles.is_admin(request.user)


admin.site.has_permission = _platform_admins_only
admin.site.site_header = "EBCloud node pools administration"

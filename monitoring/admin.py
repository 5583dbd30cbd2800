from django.contrib import admin, messages
from django.utils import timezone

from monitoring import services
from monitoring.models import (
    AgentCommand,
    AgentCredential,
    GpuErrorEvent,
    JoinToken,
    NodeAgentState,
    PoolSample,
    credential_works,
)
from pools.views.admin_audit import ViewOnlyAdmin


@admin.register(JoinToken)
class JoinTokenAdmin(admin.ModelAdmin):
    """Read-only list; tokens are minted with the API (`POST /api/agent/v1/join-tokens/`) or the
    action below, because the secret is shown only once."""

    list_display = ("token_id", "node", "state", "expires_at", "used_at", "created_by", "created_at")
    list_filter = ("used_at",)
    search_fields = ("token_id", "node__name")
    readonly_fields = ("token_id", "secret_hash", "node", "expires_at", "used_at", "created_by", "created_at")

    def has_add_permission(self, request):
        return False


@admin.register(AgentCredential)
class AgentCredentialAdmin(admin.ModelAdmin):
    list_display = ("key_prefix", "node", "created_at", "revoked_at", "revoked_reason")
    list_filter = ("revoked_reason",)
    search_fields = ("key_prefix", "node__name")
    readonly_fields = ("key_prefix", "key_hash", "node", "created_at", "revoked_at", "revoked_reason")
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected credentials")
    def revoke(self, request, queryset):
        now = timezone.now()  # a credential rotated out works until its revoked_at: revoking it ends that too
        working = queryset.filter(credential_works(now))
        nodes = {c.node for c in working.select_related("node__pool")}
        count = sum(services.credential_revoke_for_node(n, reason="RevokedByAdmin", actor=request.user, now=now) for n in nodes)
        self.message_user(request, f"Revoked {count} credential(s)", messages.SUCCESS)


@admin.register(NodeAgentState)
class NodeAgentStateAdmin(ViewOnlyAdmin):
    list_display = ("node", "acked_seq", "driver_version", "cuda_version", "last_report_at")
    search_fields = ("node__name",)


@admin.register(GpuErrorEvent)
class GpuErrorEventAdmin(ViewOnlyAdmin):
    list_display = ("node", "gpu_index", "xid", "kind", "action", "at")
    list_filter = ("kind", "xid")
    search_fields = ("node__name",)


@admin.register(AgentCommand)
class AgentCommandAdmin(ViewOnlyAdmin):
    list_display = ("node", "action", "gpu_index", "status", "created_at", "delivered_at", "finished_at")
    list_filter = ("status", "action")


@admin.register(PoolSample)
class PoolSampleAdmin(ViewOnlyAdmin):
    list_display = ("pool", "minute", "capacity_gpus", "allocated_gpus", "gpu_memory_used_pct", "pending_pods")
    list_filter = ("pool",)

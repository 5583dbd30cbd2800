"""Role changes in the audit log (issue #9 item 4), caught by model signals so that edits in the
admin site, the shell and any service are recorded alike:

- team roles: a Membership created (`role.membership.create`), its role changed
  (`role.membership.update`) or removed (`role.membership.delete`);
- global roles: a user added to or removed from the `finance` / `platform-admin` groups, from
  either side of the relation (`role.group.add`, `role.group.remove`), and the superuser flag
  turned on or off (`role.superuser`).

Each entry's object is the Membership or the user; before/after name the user, team and role,
or list the user's role groups. The actor is the request's user (pools.services.audit.current_actor).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save

from pools import roles
from pools.models import Membership
from pools.services.audit import audit_record, current_actor

ROLE_GROUPS = (roles.FINANCE, roles.PLATFORM_ADMIN)
_STASH = "_ebcloud_audit_before"


def _membership_state(membership: Membership) -> dict:
    return {"user": membership.user.get_username(), "team": membership.team.slug, "role": membership.role}


def membership_pre_save(sender, instance: Membership, raw=False, **kwargs) -> None:
    if raw or instance.pk is None:
        return
    old = Membership.objects.select_related("user", "team").filter(pk=instance.pk).first()
    setattr(instance, _STASH, _membership_state(old) if old else None)


def membership_post_save(sender, instance: Membership, created: bool, raw=False, **kwargs) -> None:
    if raw:
        return
    before = None if created else instance.__dict__.pop(_STASH, None)
    after = _membership_state(instance)
    if before == after:
        return  # saved unchanged: no role changed
    action = "role.membership.create" if created or before is None else "role.membership.update"
    audit_record(actor=current_actor(), action=action, obj=instance, before=before, after=after)


def membership_pre_delete(sender, instance: Membership, **kwargs) -> None:
    # Before any row goes: a cascade from a deleted user or team still finds both here.
    setattr(instance, _STASH, _membership_state(instance))


def membership_post_delete(sender, instance: Membership, **kwargs) -> None:
    audit_record(actor=current_actor(), action="role.membership.delete", obj=instance, before=instance.__dict__.pop(_STASH, None))


def _role_groups(user_id: int) -> list[str]:
    return sorted(Group.objects.filter(user__id=user_id, name__in=ROLE_GROUPS).values_list("name", flat=True))


def groups_changed(sender, instance, action: str, reverse: bool, pk_set, **kwargs) -> None:
    """`user.groups.add(group)` (forward: instance is the user) or `group.user_set.add(user)`
    (reverse: instance is the group): compare each affected user's role groups around it."""
    kind = action.split("_", 1)[1]
    if kind not in ("add", "remove", "clear") or (reverse and instance.name not in ROLE_GROUPS):
        return
    if action.startswith("pre_"):
        if not reverse:
            user_ids = [instance.pk]
        elif pk_set is not None:
            user_ids = list(pk_set)
        else:
            user_ids = list(instance.user_set.values_list("pk", flat=True))
        setattr(instance, _STASH, {user_id: _role_groups(user_id) for user_id in user_ids})
        return
    before_by_user = instance.__dict__.pop(_STASH, {})
    users = get_user_model().objects.in_bulk(list(before_by_user))
    for user_id, before in before_by_user.items():
        after = _role_groups(user_id)
        if after != before and user_id in users:
            audit_record(
                actor=current_actor(),
                action="role.group.add" if kind == "add" else "role.group.remove",
                obj=users[user_id],
                before={"user": users[user_id].get_username(), "groups": before},
                after={"user": users[user_id].get_username(), "groups": after},
            )


def user_pre_save(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    if raw or instance.pk is None or (update_fields is not None and "is_superuser" not in update_fields):
        return  # a login saves last_login only: no query
    setattr(instance, _STASH, sender.objects.filter(pk=instance.pk).values_list("is_superuser", flat=True).first())


def user_post_save(sender, instance, created: bool, raw=False, **kwargs) -> None:
    if raw:
        return
    before = False if created else instance.__dict__.pop(_STASH, None)
    if before is None or bool(before) == instance.is_superuser:
        return
    audit_record(
        actor=current_actor(),
        action="role.superuser",
        obj=instance,
        before={"user": instance.get_username(), "superuser": bool(before)},
        after={"user": instance.get_username(), "superuser": instance.is_superuser},
    )


def connect() -> None:
    """Called once from PoolsConfig.ready()."""
    user_model = get_user_model()
    pre_save.connect(membership_pre_save, sender=Membership, dispatch_uid="audit.membership_pre_save")
    post_save.connect(membership_post_save, sender=Membership, dispatch_uid="audit.membership_post_save")
    pre_delete.connect(membership_pre_delete, sender=Membership, dispatch_uid="audit.membership_pre_delete")
    post_delete.connect(membership_post_delete, sender=Membership, dispatch_uid="audit.membership_post_delete")
    m2m_changed.connect(groups_changed, sender=user_model.groups.through, dispatch_uid="audit.groups_changed")
    pre_save.connect(user_pre_save, sender=user_model, dispatch_uid="audit.user_pre_save")
    post_save.connect(user_post_save, sender=user_model, dispatch_uid="audit.user_post_save")

"""Demo data for `make run`: the catalog the simulated cloud sells, a price book, quotas, an
account, two teams and one user per role. Every function is idempotent (`update_or_create`).

Prices follow the article's own numbers (seed C2): an 8-card A100_80G node costs 20,000 a month
or 100 an hour on demand, so the break-even is 200 hours.
"""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

from billing.models import Account, LeaseTerm, NodePrice
from pools import roles
from pools.core.priority import parse_priority_class
from pools.core.yaml_loading import load_all
from pools.models import GpuModel, Membership, NodeType, PriorityClass, Quota, Team, Zone
from pools.selectors.namespaces import team_slug_problem
from pools.services.namespaces import namespace_lock

GPU_MODELS = {  # name: (memory GiB, monthly price per GPU, on-demand hourly price per GPU)
    "A100_80G": (80, Decimal("2500"), Decimal("12.5")),
    "H100_80G": (80, Decimal("4000"), Decimal("20")),
    "L40S": (48, Decimal("1200"), Decimal("6")),
    "T4": (16, Decimal("300"), Decimal("1.5")),
}
NODE_TYPES = {  # name: (GPUs, CPU milli, memory MiB)
    "GPU_1_CARD": (1, 16000, 128 * 1024),
    "GPU_2_CARD": (2, 32000, 256 * 1024),
    "GPU_4_CARD": (4, 64000, 512 * 1024),
    "GPU_8_CARD": (8, 128000, 1024 * 1024),
}
ZONES = {"cn-east-2a": "cn-east-2", "cn-east-2b": "cn-east-2", "cn-north-1a": "cn-north-1", "cn-north-1b": "cn-north-1"}
LEASE_TERMS = {"monthly": (1, Decimal("0")), "quarterly": (3, Decimal("0.05")), "yearly": (12, Decimal("0.15"))}
# D2: a preemptible node costs 60% of a guaranteed one on the same term (docs/guide-finance.md).
PREEMPTIBLE_SHARE = Decimal("0.60")


def preemptible_discount(discount: Decimal) -> Decimal:
    """The term's preemptible discount off the list price: 60% of the guaranteed price."""
    return 1 - PREEMPTIBLE_SHARE * (1 - discount)
QUOTAS = {  # (region, model): GPUs
    ("cn-east-2", "A100_80G"): 48,
    ("cn-east-2", "H100_80G"): 16,
    ("cn-east-2", "L40S"): 64,
    ("cn-east-2", "T4"): 64,
    ("cn-north-1", "A100_80G"): 32,
    ("cn-north-1", "H100_80G"): 8,
    ("cn-north-1", "L40S"): 32,
    ("cn-north-1", "T4"): 128,
}
TEAMS = {"algorithm": "Algorithm", "inference": "Inference"}
USERS = {  # username: (team slug or None, team role, global group, superuser)
    "admin": (None, None, roles.PLATFORM_ADMIN, True),
    "finance": (None, None, roles.FINANCE, False),
    "lead-algorithm": ("algorithm", Membership.Role.LEAD, None, False),
    "lead-inference": ("inference", Membership.Role.LEAD, None, False),
    "member-algorithm": ("algorithm", Membership.Role.MEMBER, None, False),
}
ACCOUNT_BALANCE = Decimal("1000000.00")
CURRENCY = "CNY"


@transaction.atomic
def load_catalog() -> None:
    """GPU models, node types, zones, price book, lease terms, quotas and the account."""
    epoch = timezone.now().replace(year=2024, month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    models = {}
    for name, (memory, _, _) in GPU_MODELS.items():
        models[name], _ = GpuModel.objects.update_or_create(name=name, defaults={"memory_gib": memory})
    types = {}
    for name, (gpus, cpu, memory) in NODE_TYPES.items():
        types[name], _ = NodeType.objects.update_or_create(name=name, defaults={"gpu_count": gpus, "cpu_milli": cpu, "memory_mib": memory})
    for zone, region in ZONES.items():
        Zone.objects.update_or_create(name=zone, defaults={"region": region})
    for model_name, (_, monthly, hourly) in GPU_MODELS.items():
        for node_type in types.values():
            NodePrice.objects.update_or_create(
                node_type=node_type,
                gpu_model=models[model_name],
                effective_from=epoch,
                defaults={"monthly_price": monthly * node_type.gpu_count, "hourly_price": hourly * node_type.gpu_count, "currency": CURRENCY},
            )
    for lease_type, (months, discount) in LEASE_TERMS.items():
        LeaseTerm.objects.update_or_create(
            lease_type=lease_type, effective_from=epoch,
            defaults={"months": months, "discount": discount, "preemptible_discount": preemptible_discount(discount)},
        )  # fmt: skip
    for (region, model_name), limit in QUOTAS.items():
        Quota.objects.update_or_create(region=region, gpu_model=models[model_name], team=None, defaults={"limit_gpus": limit})
    Account.objects.get_or_create(name="default", defaults={"balance": ACCOUNT_BALANCE, "currency": CURRENCY})


@transaction.atomic
def load_priority_classes(path: Path) -> list[str]:
    """The PriorityClasses of `path` (examples/priorityclasses.yaml, the same file `kubectl
    apply -f` takes), so that the examples' pods find their classes; returns their names."""
    names = []
    for document in (d for d in load_all(path.read_text()) if d is not None):
        spec = parse_priority_class(document)
        PriorityClass.objects.update_or_create(name=spec.name, defaults={
            "value": spec.value, "preemption_policy": spec.preemption_policy,
            "global_default": spec.global_default, "description": spec.description,
        })  # fmt: skip
        names.append(spec.name)
    return names


@transaction.atomic
def load_people(password_file: Path) -> dict[str, str]:
    """Teams, groups and one user per role; returns username -> password (kept in `password_file`)."""
    passwords = json.loads(password_file.read_text()) if password_file.exists() else {}
    for group in (roles.PLATFORM_ADMIN, roles.FINANCE):
        Group.objects.get_or_create(name=group)
    namespace_lock(*TEAMS)  # a team's slug is its namespace: as in the admin, never one another team holds
    for slug in TEAMS:
        if not Team.objects.filter(slug=slug).exists() and (problem := team_slug_problem(slug)):
            raise CommandError(f"cannot create the demo team {slug!r}: {problem}")
    teams = {slug: Team.objects.update_or_create(slug=slug, defaults={"name": name})[0] for slug, name in TEAMS.items()}
    user_model = get_user_model()
    for username in USERS:
        passwords.setdefault(username, secrets.token_urlsafe(9))
    # Each hash takes a second or more (PBKDF2) and hashlib lets go of the GIL: hashed side by
    # side, the people load in the time of the slowest, not of all of them one after the other.
    with ThreadPoolExecutor(max_workers=len(USERS)) as pool:
        hashes = dict(zip(USERS, pool.map(make_password, (passwords[name] for name in USERS)), strict=True))
    for username, (team_slug, role, group, superuser) in USERS.items():
        user, _ = user_model.objects.get_or_create(username=username, defaults={"email": f"{username}@example.com"})
        user.is_superuser = user.is_staff = superuser
        user.password = hashes[username]
        user.save()
        if group:
            user.groups.add(Group.objects.get(name=group))
        if team_slug:
            Membership.objects.update_or_create(user=user, team=teams[team_slug], defaults={"role": role})
    password_file.parent.mkdir(parents=True, exist_ok=True)
    password_file.write_text(json.dumps(passwords, indent=2))
    password_file.chmod(0o600)
    return passwords

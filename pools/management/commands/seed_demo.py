"""`manage.py seed_demo`: load the demo catalog, the examples' PriorityClasses, people and example
pools, print the logins."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from billing.budgets import budgets_sync
from billing.demo import load_prices
from pools.core.documents import load_yaml
from pools.demo.seed import load_catalog, load_people, load_priority_classes
from pools.models import GpuNodePool, PoolOrder
from pools.services import pools as services

EXAMPLES = Path(settings.BASE_DIR) / "examples"
DEMO_POOLS = (  # (file, lead who creates it, approve its order?)
    ("demo-train-pool.yaml", "lead-algorithm", True),  # the article's pool, labelled for its pod
    ("inference-pool.yaml", "lead-inference", True),
    ("batch-preemptible-pool.yaml", "lead-algorithm", False),  # left for an admin to approve
)


class Command(BaseCommand):
    help = "Load demo data (idempotent) and print one login per role."

    def add_arguments(self, parser):
        parser.add_argument("--no-pools", action="store_true", help="Only the catalog and the people")
        parser.add_argument("--url", default="http://127.0.0.1:8000/", help="Where the logins are for (printed)")

    def handle(self, *args, no_pools: bool = False, url: str = "http://127.0.0.1:8000/", **options):
        load_catalog()
        load_priority_classes(EXAMPLES / "priorityclasses.yaml")
        load_prices()
        passwords = load_people(Path(settings.VAR_DIR) / "demo-passwords.json")
        if not no_pools:
            self._pools()
            budgets_sync()
        self.stdout.write(self.style.SUCCESS(f"Demo data loaded. Log in at {url} as:"))
        for username, password in passwords.items():
            self.stdout.write(f"  {username:<18} {password}")

    def _pools(self) -> None:
        users = get_user_model().objects
        admin = users.get(username="admin")
        for filename, lead, approve in DEMO_POOLS:
            document = load_yaml((EXAMPLES / filename).read_text())
            if GpuNodePool.objects.active().filter(name=document["metadata"]["name"]).exists():
                continue
            pool = services.pool_create(user=users.get(username=lead), document=document)
            order = pool.orders.filter(status=PoolOrder.Status.PENDING).first()
            if approve and order is not None:
                services.order_approve(user=admin, order=order)

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


class PoolsConfig(AppConfig):
    name = "pools"
    verbose_name = "GPU node pools"

    def ready(self) -> None:
        from config import db_loaders
        from pools import signals as audit_signals
        from pools.permissions import ensure_role_groups

        connection_created.connect(db_loaders.install, dispatch_uid="config.db_loaders")

        post_migrate.connect(ensure_role_groups, dispatch_uid="pools.ensure_role_groups")
        audit_signals.connect()

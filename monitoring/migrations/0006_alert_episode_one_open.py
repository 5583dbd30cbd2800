"""At most one open AlertEpisode per (pool, rule): `ended_at`, and a partial unique constraint
on the episodes where it is empty. Before the constraint, every episode but the latest of its
(pool, rule) is ended (two workers could open two for one condition); the latest stays open
and the next evaluation ends it if it is over."""

from django.db import migrations, models
from django.db.models import Exists, F, OuterRef, Q


def end_all_but_the_latest(apps, schema_editor):
    AlertEpisode = apps.get_model("monitoring", "AlertEpisode")
    later = AlertEpisode.objects.filter(pool_id=OuterRef("pool_id"), rule=OuterRef("rule")).filter(
        Q(started_at__gt=OuterRef("started_at")) | Q(started_at=OuterRef("started_at"), pk__gt=OuterRef("pk"))
    )
    AlertEpisode.objects.filter(Exists(later), ended_at__isnull=True).update(ended_at=F("last_seen_at"))


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0005_alert_episodes_and_silences"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertepisode",
            name="ended_at",
            field=models.DateTimeField(blank=True, help_text="When it was last seen holding; set when the rule next holds after the gap that ended it (empty until then)", null=True),
        ),
        migrations.RunPython(end_all_but_the_latest, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="alertepisode",
            constraint=models.UniqueConstraint(condition=Q(ended_at__isnull=True), fields=("pool", "rule"), name="alertepisode_one_open"),
        ),
    ]

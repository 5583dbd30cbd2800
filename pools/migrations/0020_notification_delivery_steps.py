"""Notifications: mail and webhook marked done apart, and failed tries counted.

A row delivered before mailed at its `delivered_at` if it mailed anyone, and called the webhook
then if it has an answer."""

from django.db import migrations, models
from django.db.models import F


def steps_of_delivered(apps, schema_editor):
    Notification = apps.get_model("pools", "Notification")
    delivered = Notification.objects.exclude(delivered_at=None)
    delivered.filter(emailed_to__gt=0).update(mailed_at=F("delivered_at"))
    delivered.exclude(webhook_status="").update(webhook_at=F("delivered_at"))


class Migration(migrations.Migration):

    dependencies = [
        ('pools', '0019_order_paying'),
    ]

    operations = [
        migrations.AlterField(
            model_name='notification',
            name='delivered_at',
            field=models.DateTimeField(blank=True, help_text='When mail and webhook were both done (or found nobody to send to)', null=True),
        ),
        migrations.AddField(
            model_name='notification',
            name='mailed_at',
            field=models.DateTimeField(blank=True, help_text='When the mail went out (empty: not yet, or nobody to mail)', null=True),
        ),
        migrations.AddField(
            model_name='notification',
            name='webhook_at',
            field=models.DateTimeField(blank=True, help_text='When the webhook was called (empty: not yet, or none configured); its answer is webhook_status', null=True),
        ),
        migrations.AddField(
            model_name='notification',
            name='attempts',
            field=models.PositiveSmallIntegerField(db_default=0, default=0, help_text='Failed delivery tries so far'),
        ),
        migrations.AddField(
            model_name='notification',
            name='last_error',
            field=models.CharField(blank=True, db_default='', default='', help_text='Why the last try failed', max_length=200),
        ),
        migrations.AddField(
            model_name='notification',
            name='next_try_at',
            field=models.DateTimeField(blank=True, help_text='After a failed try: not tried again before this', null=True),
        ),
        migrations.AddField(
            model_name='notification',
            name='failed_at',
            field=models.DateTimeField(blank=True, help_text='When delivery was given up after too many failed tries', null=True),
        ),
        migrations.RunPython(steps_of_delivered, migrations.RunPython.noop, elidable=True),
    ]

# Lease periods (a node's share of a paid lease, issue 20) and preemptible prices per lease term.

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0005_workload_usage_hourly_costs'),
        ('pools', '0015_pod_phase_deleted_node'),
    ]

    operations = [
        migrations.AddField(
            model_name='leaseterm',
            name='preemptible_discount',
            field=models.DecimalField(blank=True, decimal_places=4, help_text='Off the monthly list price for a preemptible node on this term (0.40 = 40% off); empty: not sold preemptible', max_digits=5, null=True, validators=[django.core.validators.MinValueValidator(0), django.core.validators.MaxValueValidator(1)]),
        ),
        migrations.CreateModel(
            name='LeasePeriod',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('slot', models.PositiveSmallIntegerField(default=0, help_text="Which of the order's node slots (its share of the debit)")),
                ('amount', models.DecimalField(decimal_places=2, help_text="This slot's share of the order's debit", max_digits=14)),
                ('currency', models.CharField(default='CNY', max_length=3)),
                ('lease_start', models.DateTimeField()),
                ('lease_end', models.DateTimeField()),
                ('held_from', models.DateTimeField(help_text='First hour this node holds the slot (hour-aligned)')),
                ('held_to', models.DateTimeField(blank=True, help_text='Hour its successor takes the slot over; empty: to the lease end', null=True)),
                ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='lease_periods', to='pools.node')),
                ('order', models.ForeignKey(blank=True, help_text='The order that paid it', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='pools.poolorder')),
            ],
            options={
                'ordering': ['node', 'lease_start', 'held_from'],
                'indexes': [models.Index(fields=['node', 'lease_end'], name='billing_lea_node_id_792351_idx')],
            },
        ),
    ]

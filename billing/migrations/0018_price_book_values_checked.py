"""What the admin may write into the price book and the account: prices and fees of 0 or more,
discounts from 0 to 1, lease terms of at least a month, ISO 4217 currency codes, a balance not
below zero (`billing.models`). Validators only: no column changes, no table is rewritten (on
SQLite neither, so migration 0015's triggers stay), and rows stored before are left as they are
(`billing.pricing.quote_for` and the simulated cloud's `pay` refuse a negative order from them).
"""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0017_usage_alike_nodes_one_record'),
    ]

    operations = [
        migrations.AlterField(
            model_name='account',
            name='balance',
            field=models.DecimalField(decimal_places=2, max_digits=16, validators=[django.core.validators.MinValueValidator(0)]),
        ),
        migrations.AlterField(
            model_name='account',
            name='currency',
            field=models.CharField(default='CNY', max_length=3, validators=[django.core.validators.RegexValidator('^[A-Z]{3}\\Z', message='Enter an ISO 4217 currency code: three capital letters, such as CNY or USD.')]),
        ),
        migrations.AlterField(
            model_name='leaseterm',
            name='discount',
            field=models.DecimalField(decimal_places=4, help_text='0.15 = 15% off', max_digits=5, validators=[django.core.validators.MinValueValidator(0, message='Enter a fraction from 0 to 1, such as 0.15 for 15 percent off.'), django.core.validators.MaxValueValidator(1, message='Enter a fraction from 0 to 1, such as 0.15 for 15 percent off: above 1 the price turns negative.')]),
        ),
        migrations.AlterField(
            model_name='leaseterm',
            name='months',
            field=models.PositiveSmallIntegerField(validators=[django.core.validators.MinValueValidator(1, message='A lease runs at least 1 month.')]),
        ),
        migrations.AlterField(
            model_name='leaseterm',
            name='preemptible_discount',
            field=models.DecimalField(blank=True, decimal_places=4, help_text='Off the monthly list price for a preemptible node on this term (0.40 = 40% off); empty: not sold preemptible', max_digits=5, null=True, validators=[django.core.validators.MinValueValidator(0, message='Enter a fraction from 0 to 1, such as 0.15 for 15 percent off.'), django.core.validators.MaxValueValidator(1, message='Enter a fraction from 0 to 1, such as 0.15 for 15 percent off: above 1 the price turns negative.')]),
        ),
        migrations.AlterField(
            model_name='nodeprice',
            name='currency',
            field=models.CharField(default='CNY', max_length=3, validators=[django.core.validators.RegexValidator('^[A-Z]{3}\\Z', message='Enter an ISO 4217 currency code: three capital letters, such as CNY or USD.')]),
        ),
        migrations.AlterField(
            model_name='nodeprice',
            name='hourly_price',
            field=models.DecimalField(decimal_places=4, max_digits=12, validators=[django.core.validators.MinValueValidator(0, message='Enter 0 or more: a negative price would make orders that pay money into the account.')]),
        ),
        migrations.AlterField(
            model_name='nodeprice',
            name='monthly_price',
            field=models.DecimalField(decimal_places=2, max_digits=14, validators=[django.core.validators.MinValueValidator(0, message='Enter 0 or more: a negative price would make orders that pay money into the account.')]),
        ),
        migrations.AlterField(
            model_name='pricebookentry',
            name='amount',
            field=models.DecimalField(decimal_places=6, max_digits=14, validators=[django.core.validators.MinValueValidator(0, message='Enter 0 or more: a negative price would make orders that pay money into the account.')]),
        ),
        migrations.AlterField(
            model_name='pricebookentry',
            name='currency',
            field=models.CharField(default='CNY', max_length=3, validators=[django.core.validators.RegexValidator('^[A-Z]{3}\\Z', message='Enter an ISO 4217 currency code: three capital letters, such as CNY or USD.')]),
        ),
    ]

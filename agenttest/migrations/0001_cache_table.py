"""The database cache's table (agenttest.env.CACHE_TABLE), created by `migrate` so no install path can miss it.

A table only, never a model in the migration state: Django's database cache reads and writes it with raw SQL, and a
model nobody declares would make `makemigrations` want to delete it. The columns are the ones `createcachetable`
makes.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.CreateModel(
                    name="CacheEntry",
                    fields=[
                        ("cache_key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                        ("value", models.TextField()),
                        ("expires", models.DateTimeField(db_index=True)),
                    ],
                    options={"db_table": "agenttest_cache"},
                ),
            ],
            state_operations=[],
        ),
    ]

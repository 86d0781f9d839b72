"""The Celery app: eager in-process on the embedded default, a Redis broker when configured."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("mortar")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

"""Settings of the example project; the database and queue come from the environment.

``EXAMPLE_DATABASE_URL`` (a ``postgresql://`` URL; default the local ``test`` database)
and ``TASKRUNNER_URL`` (the queue; default the same PostgreSQL database, so dispatches
can be written in the request's transaction).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

_DATABASE_URL = os.environ.get("EXAMPLE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def database_settings(url: str) -> dict[str, str]:
    """Django's DATABASES entry for a ``postgresql://`` URL."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


SECRET_KEY = os.environ.get("EXAMPLE_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = ["examples.django_example"]
ROOT_URLCONF = "examples.django_example.urls"
DATABASES = {"default": database_settings(_DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True

TASKRUNNER = {
    "url": os.environ.get("TASKRUNNER_URL", _DATABASE_URL + "?schema=taskrunner"),
    "app": "examples.django_example.tasks:app",
}

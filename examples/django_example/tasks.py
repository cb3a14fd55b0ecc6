"""The example's tasks; ``taskrunner worker examples.django_example.tasks:app`` runs them.

Plain ``def`` tasks using the ORM: the worker runs them in threads. Importing this
module outside Django (the worker does) sets Django up first.
"""

from __future__ import annotations

import os

import django

import taskrunner

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_example.settings")
django.setup()

app = taskrunner.App("shop")


@app.task(store_result=True)
def confirm_order(order_id: int) -> str:
    """Mark the order confirmed (the e-mail would go out here)."""
    from django.db import close_old_connections

    from .models import Order

    close_old_connections()
    try:
        updated = Order.objects.filter(id=order_id).update(confirmed=True)
    finally:
        close_old_connections()
    if not updated:
        raise LookupError(f"no order {order_id}")
    return f"order {order_id} confirmed"

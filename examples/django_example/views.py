"""The view: an order and its confirmation job, committed together."""

from __future__ import annotations

import json

from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .client import is_postgres_queue, producer
from .models import Order
from .tasks import confirm_order


@csrf_exempt  # an API endpoint of the example; a real form keeps Django's CSRF check
@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    """Create the order and dispatch its confirmation; 201 with both ids."""
    try:
        email = str(json.loads(request.body)["email"])
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"error": 'expected {"email": ...}'}, status=400)
    with transaction.atomic():
        order = Order.objects.create(email=email)
        if is_postgres_queue():
            # Written in this transaction: the job exists iff the order does.
            job = producer().dispatch(confirm_order, order.id, connection=connection)
        else:
            # Redis: sent once the order is committed (see the package docstring).
            job = None
            transaction.on_commit(lambda: producer().dispatch(confirm_order, order.id))
    return JsonResponse({"order": order.id, "job": job}, status=201)


def order_status(request: HttpRequest, order_id: int) -> HttpResponse:
    """Whether the order is confirmed yet."""
    order = Order.objects.filter(id=order_id).first()
    if order is None:
        return JsonResponse({"error": f"no order {order_id}"}, status=404)
    return JsonResponse({"order": order.id, "confirmed": order.confirmed})

"""One model: an order whose confirmation is a background job."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.CharField(max_length=200)
    confirmed = models.BooleanField(default=False)

    class Meta:
        app_label = "shop"

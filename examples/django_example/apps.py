"""The example's Django app."""

from __future__ import annotations

from django.apps import AppConfig


class ExampleConfig(AppConfig):
    name = "examples.django_example"
    label = "shop"

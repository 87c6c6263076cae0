from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "tests.integration.django_project.shop"
    label = "shop"

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import fulfil_order


def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():  # the order and its job commit together, or neither
        order = Order.objects.create(item=request.POST["item"])
        result = fulfil_order.enqueue(order.id)
    return JsonResponse({"order": order.id, "task": result.id}, status=201)


def order_task(request: HttpRequest, result_id: str) -> JsonResponse:
    result = fulfil_order.get_result(result_id)
    return JsonResponse({
        "status": result.status,
        "value": result.return_value if result.status == "SUCCESSFUL" else None,
    })

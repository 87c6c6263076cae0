from __future__ import annotations

try:
    from django.tasks import TaskContext, task  # Django 6.0 and later
except ImportError:
    from django_tasks import TaskContext, task  # Django 4.2-5.2: the django-tasks backport

from .models import Order


@task
def fulfil_order(order_id: int) -> str:
    Order.objects.filter(id=order_id).update(status="fulfilled")
    return f"order {order_id} fulfilled"


@task(queue_name="emails", priority=10, takes_context=True)
def send_receipt(context: TaskContext, order_id: int) -> int:
    if not Order.objects.filter(id=order_id).exists():
        raise LookupError(f"no order {order_id}")
    return context.attempt  # 1 on the first attempt


@task
async def ping(label: str) -> str:
    return f"pong {label}"

"""jobq in a Django project: its settings, ``manage.py jobq_consume``, and enqueueing within
Django's own transaction (docs/how-to/django.md).

```python
INSTALLED_APPS = [..., "jobq.contrib.django"]
JOBQ = {"CONFIG": "jobq.yaml", "APP": "shop.tasks:app"}

from jobq.contrib.django import enqueue

with transaction.atomic():
    order = Order.objects.create(email=email)
    enqueue(send_receipt, Receipt(order_id=order.id, email=email))  # commits with the order
```
"""

from __future__ import annotations

from jobq.contrib.django.enqueuing import enqueue

__all__ = ["enqueue"]

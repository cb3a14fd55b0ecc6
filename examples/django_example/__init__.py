"""Django: settings, a view that dispatches in the request's transaction, a worker command.

A Django project and app in one package (settings, urls, models, views, tasks):

* ``settings.TASKRUNNER = {"url": ..., "app": "examples.django_example.tasks:app"}``;
* `client.producer()`: one `taskrunner.SyncProducer` per process, opened lazily
  (made before a pre-fork server forks, it still works in each worker process);
* ``views.place_order``: the order row and its confirmation job in one transaction.
  On a PostgreSQL queue the job is written in that transaction
  (``connection=django.db.connection``); on Redis it is dispatched by
  ``transaction.on_commit`` (after the commit: lost if the process dies in between;
  use the outbox, docs/transactional.md, to close that gap);
* ``python manage.py taskrunner_worker`` runs ``taskrunner worker`` with those settings
  (or run ``DJANGO_SETTINGS_MODULE=... taskrunner worker examples.django_example.tasks:app``).

docs/integrations.md walks through it.
"""

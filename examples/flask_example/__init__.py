"""Flask: one `SyncProducer` per process, made in the app factory; dispatch from a route.

Run it (a worker and the web app, on one Redis)::

    taskrunner worker examples.flask_example.tasks:app --url redis://127.0.0.1:6379/0 &
    TASKRUNNER_URL=redis://127.0.0.1:6379/0 flask --app examples.flask_example.web run

Then ``curl -X POST localhost:5000/signups -H 'content-type: application/json'
-d '{"email": "ada@example.com"}'`` and ``curl localhost:5000/jobs/<id>``.
"""

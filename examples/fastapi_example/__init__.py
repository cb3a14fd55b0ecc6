"""FastAPI: the async `Producer` opened once in the lifespan, dispatch from an endpoint.

Run it (a worker and the API, on one Redis)::

    taskrunner worker examples.fastapi_example.tasks:app --url redis://127.0.0.1:6379/0 &
    TASKRUNNER_URL=redis://127.0.0.1:6379/0 uvicorn examples.fastapi_example.web:api

Then ``curl -X POST localhost:8000/signups -H 'content-type: application/json'
-d '{"email": "ada@example.com"}'`` and ``curl localhost:8000/jobs/<id>``.
"""

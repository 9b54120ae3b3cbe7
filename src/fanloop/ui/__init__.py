"""A face for browsers: a run served over the protocols front-ends speak (docs/ui.md).

::

    from fastapi import FastAPI
    from fanloop.ui import AGUIApp

    app = FastAPI()
    app.mount("/ag-ui", AGUIApp(agent))          # the AG-UI protocol over SSE

Each app is a plain ASGI app (mount it in FastAPI, Starlette, or serve it with uvicorn); the
same answers are available as async generators for any other framework
(:func:`agui_events`). A thread or chat id names a :class:`~fanloop.sessions.Session` in the
app's store; dangerous calls wait for the browser's answer (an interrupt), which may arrive at
any process sharing the store; a client that disconnects cancels its run.
"""

from ._agui import AGUIApp, agui_events

__all__ = ["AGUIApp", "agui_events"]

"""A face for browsers: a run served over the protocols front-ends speak (docs/ui.md).

::

    from fastapi import FastAPI
    from fanloop.ui import AGUIApp, VercelAIApp

    app = FastAPI()
    app.mount("/ag-ui", AGUIApp(agent))          # the AG-UI protocol over SSE
    app.mount("/api/chat", VercelAIApp(agent))   # the Vercel AI SDK UI message stream (v5/v6)

Each app is a plain ASGI app (mount it in FastAPI, Starlette, or serve it with uvicorn); the
same answers are available as async generators for any other framework (:func:`agui_events`,
:func:`vercel_chunks`). A thread or chat id names a :class:`~fanloop.sessions.Session` in the
app's store; dangerous calls wait for the browser's answer (an interrupt), which may arrive at
any process sharing the store; a client that disconnects cancels its run.
"""

from ._agui import AGUIApp, agui_events
from ._vercel import UI_MESSAGE_STREAM_HEADERS, VercelAIApp, vercel_chunks

__all__ = ["AGUIApp", "UI_MESSAGE_STREAM_HEADERS", "VercelAIApp", "agui_events", "vercel_chunks"]

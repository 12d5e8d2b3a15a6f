"""Live streams (docs/PROTOCOL.md §6, §4.2): the SSE inbox, A2A streaming and the web UI's session
stream, served by lean raw-ASGI handlers that hikyaku.asgi routes to ahead of Django.

- hub:    one doorbell listener + one periodic catch-up scan per process; wakes streams
- feeds:  what each stream reads from the event table (inbox, tenant/web)
- a2a:    SendStreamingMessage / SubscribeToTask (and their WSGI fallback)
- serve:  the async driver (and the polling WSGI driver) that runs a feed as a response
- inbox, web: the request handlers; db: the bounded DB thread pool; sse: framing
"""

"""Live streams (docs/PROTOCOL.md §6, §4.2): the SSE inbox, A2A streaming and the web UI's session
stream, served by lean raw-ASGI handlers that hikyaku.asgi routes to ahead of Django.

- hub:    one doorbell listener + one periodic catch-up scan per process; wakes streams
- feeds:  what each stream reads from the event table (inbox, tenant/web)
- a2a:    SendStreamingMessage / SubscribeToTask; peer: the same on agents' own endpoints
- answers: blocking SendMessage on agents' endpoints, waiting on the hub
- serve:  the async driver that runs a feed as a response
- handoff, views: what a web (WSGI) process answers instead (421: the stream tier serves it)
- inbox, web: the request handlers; db: the bounded DB thread pool; sse: framing
"""

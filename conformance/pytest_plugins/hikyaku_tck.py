"""A pytest plugin loaded into the A2A TCK's own run (`-p hikyaku_tck`), not into ours.

The TCK's webhook receiver (tck/webhook/server.py) listens on 0.0.0.0 by default, which would
expose it on every interface of the machine running `make tck`; the broker reaches it on
127.0.0.1, so bind it there. The receiver is a dataclass whose `host` field has no CLI
option, hence this default override instead of editing the unpacked TCK.
"""

import dataclasses


def pytest_configure(config):
    from tck.webhook import server

    fields = [f.name for f in dataclasses.fields(server.WebhookReceiver) if f.init]
    defaults = list(server.WebhookReceiver.__init__.__defaults__ or ())
    # `host` is the only __init__ argument with a default; keep it that way or fail loudly.
    assert fields == ["host"] and len(defaults) == 1, "TCK WebhookReceiver changed"
    server.WebhookReceiver.__init__.__defaults__ = ("127.0.0.1",)
    server.WebhookReceiver.host = "127.0.0.1"

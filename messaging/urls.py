"""Messaging routes; the A2A JSON-RPC endpoint and task timelines are added by the messaging issue."""

urlpatterns: list = []

"""Web UI views, one module per area; `base` holds the membership check every page uses."""

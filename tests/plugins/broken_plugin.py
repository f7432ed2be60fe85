"""A plugin whose import fails: start-up must stop and name it."""

raise RuntimeError("the ticket system's URL is not configured")

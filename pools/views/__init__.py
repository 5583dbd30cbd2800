"""The web pages: thin shells over selectors and services, rendered with `base.htmx_render`."""

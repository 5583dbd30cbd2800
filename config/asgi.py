import os

from django.core.asgi import get_asgi_application

from config.startup import settings_or_raise

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
settings_or_raise()  # a misconfigured environment: its one line on stderr, then the server's own failed start
application = get_asgi_application()

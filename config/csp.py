"""The Content-Security-Policy header (`EBCLOUD_CONTENT_SECURITY_POLICY`); Django 5.2 has none
built in.

Sent on every response, with DEBUG on as well as off: development then runs under the policy
production has, and a page that breaks it (an inline handler, a `<style>` block) shows up in
the browser's console, and fails the browser journeys (tests/e2e), when it is written. Django's
own DEBUG error pages then render unstyled (their inline CSS is refused), still readable.
A response that already has the header (a view with its own policy) keeps it.
"""

from __future__ import annotations

from django.conf import settings

HEADER = "Content-Security-Policy"


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = settings.EBCLOUD_CONTENT_SECURITY_POLICY
        if policy and HEADER not in response:
            response[HEADER] = policy
        return response

"""Static files as `make run` and production serve them (issue 21 acceptance item 8): under
content-hashed names cached for a year, gzipped for browsers that accept it, and plotly never
in the way of the page: no page loads it with a <script> of its own; the deferred chart scripts
fetch it after the page is shown (static/js/app.js, ebcloudWithPlotly).

The test suite itself runs with the plain storage (no collectstatic needed); this module
collects into a temporary STATIC_ROOT with the production storage and serves through WhiteNoise.
"""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.test import Client

from pools.services import pools as pool_services
from tests.conftest import make_document

YEAR = "max-age=315360000"


@pytest.fixture
def collected(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "static"
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}}
    call_command("collectstatic", interactive=False, verbosity=0)
    return settings.STATIC_ROOT


def test_pages_name_static_files_by_content_hash_and_whitenoise_serves_them_gzipped_for_a_year(collected, actors):
    pool_services.pool_create(user=actors["lead"], document=make_document("hashed"))
    client = Client()  # a new handler: WhiteNoise indexes the collected files when it starts
    client.force_login(actors["lead"])
    page = client.get("/pools/hashed/").content.decode()
    charts = re.search(r'<script src="(/static/js/charts\.[0-9a-f]{12}\.js)" data-plotly="(/static/vendor/plotly\.min\.[0-9a-f]{12}\.js)" defer></script>', page)
    assert charts, "the chart script is deferred and names plotly by its hashed URL"
    assert not re.search(r'<script src="[^"]*plotly', page), "no page loads plotly itself"
    css = re.search(r'href="(/static/css/app\.[0-9a-f]{12}\.css)"', page)
    assert css
    for url in (charts.group(1), charts.group(2), css.group(1)):
        response = client.get(url, headers={"Accept-Encoding": "gzip"})
        assert response.status_code == 200, url
        assert response["Content-Encoding"] == "gzip", url
        assert YEAR in response["Cache-Control"] and "immutable" in response["Cache-Control"], url
        response.close()
    plotly = client.get(charts.group(2), headers={"Accept-Encoding": "gzip"})
    assert int(plotly["Content-Length"]) < 2_000_000  # 4.8 MB as sent uncompressed before
    plotly.close()

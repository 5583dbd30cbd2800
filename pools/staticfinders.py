"""Static files served straight from installed Python packages (design §4: plotly's own
`plotly.min.js`, never a CDN, never inlined, never copied into the repository).

`PackageFileFinder` maps a few static paths to files inside installed packages, so
`{% static 'vendor/plotly.min.js' %}` works in development (whitenoise or runserver use the
finders) and `collectstatic` picks the file up for production like any other static file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

# static path -> (package, path inside the package)
PACKAGE_FILES = {"vendor/plotly.min.js": ("plotly", "package_data/plotly.min.js")}


def _package_file(package: str, inner: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / inner
    return path if path.is_file() else None


class PackageFileFinder(BaseFinder):
    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        find_all = find_all or kwargs.get("all", False)
        if path not in PACKAGE_FILES:
            return [] if find_all else None
        found = _package_file(*PACKAGE_FILES[path])
        if found is None:
            return [] if find_all else None
        return [str(found)] if find_all else str(found)

    def list(self, ignore_patterns):
        for static_path, (package, inner) in PACKAGE_FILES.items():
            found = _package_file(package, inner)
            if found is None:
                continue
            storage = FileSystemStorage(location=str(found.parent))
            storage.prefix = str(Path(static_path).parent)
            yield found.name, storage

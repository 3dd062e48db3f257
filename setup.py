"""The compiled part of the project: app/sansio/_columns.c, EPISODES bodies parsed into
columns (pyproject.toml holds the rest); and the browser-training assets made optional.

Optional: where no C compiler or Python headers are at hand, the install goes on without
it and app.sansio.chunk_columns packs episode chunks in Python (slower, same results).

The vendor files the pages load (onnxruntime-web, uPlot, Swagger UI) come from
node_modules/, which `npm ci` fills and a plain clone lacks (`pip install git+URL`).
pyproject.toml maps each such folder to a data-only package under app/http/web_files/;
where a folder is missing, that package is left out of the build (one warning line) instead
of failing it. The gateway installed from such a wheel still starts: /vendor/<name>/ answers
404 saying the wheel was built without `npm ci`, and the dashboard, the in-browser demo
and /docs say what is missing (app/http/web.py).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.dist import Distribution

VENDOR_PACKAGES = "app.http.web_files."  # the mapped vendor folders; .static is the repository's static/


class _OptionalVendorFiles(Distribution):
    """pyproject.toml's packages, less the vendor packages whose node_modules folder is missing."""

    def parse_config_files(self, *args, **kwargs):
        super().parse_config_files(*args, **kwargs)
        package_dir = self.package_dir or {}
        missing = [
            name for name in self.packages or []
            if name.startswith(VENDOR_PACKAGES) and name in package_dir and not os.path.isdir(package_dir[name])
        ]
        if not missing:
            return
        folders = ", ".join(package_dir[name] for name in missing)
        print(
            f"warning: {folders} missing (run `npm ci` first to include them): building without the browser-training "
            "assets; the dashboard, the in-browser demo and /docs will say what is missing",
            file=sys.stderr,
        )
        self.packages = [name for name in self.packages if name not in missing]
        for name in missing:
            del package_dir[name]
            (self.package_data or {}).pop(name, None)


setup(
    distclass=_OptionalVendorFiles,
    ext_modules=[
        Extension(
            "app.sansio._columns", ["app/sansio/_columns.c"], depends=["app/sansio/_powers_of_five.h"], optional=True
        )
    ],
)

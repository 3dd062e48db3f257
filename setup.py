"""The compiled part of the project: app/rllink/_columns.c, EPISODES bodies parsed into
columns (pyproject.toml holds the rest).

Optional: where no C compiler or Python headers are at hand, the install goes on without
it and app.rllink.chunk_columns packs episode chunks in Python (slower, same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "app.rllink._columns", ["app/rllink/_columns.c"], depends=["app/rllink/_powers_of_five.h"], optional=True
        )
    ]
)

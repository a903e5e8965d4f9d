"""The one compiled part: the ranked-lists form's loop over str ids (lists.py falls back to its
Python loop where it is not built, so a failed compile still installs the package)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "retrieval_metrics.functional.ranking._str_lists",
            ["src/retrieval_metrics/functional/ranking/_str_lists.c"],
            optional=True,
        )
    ]
)

"""The C++ suffix tree (actors/drafts/_suffix_tree.cpp), an optional extension.

It is built when pybind11 and a C++17 compiler are there (pip's isolated build installs
pybind11 from pyproject's build requirements). Without a compiler the build says so and goes
on, and without pybind11 (a `--no-build-isolation` build in an environment that lacks it) it
is left out: either way the package installs and `actors.drafts.suffix_tree` uses its
pure-Python twin, logging which one it uses.
"""

import sys

from setuptools import setup

try:
    from pybind11.setup_helpers import Pybind11Extension, build_ext
except ImportError:
    print(
        "setup.py: pybind11 is not installed; building without the C++ suffix tree "
        "(the pure-Python one will be used)",
        file=sys.stderr,
    )
    setup()
else:
    setup(
        ext_modules=[
            Pybind11Extension(
                "actors.drafts._suffix_tree",
                ["actors/drafts/_suffix_tree.cpp"],
                cxx_std=17,
                extra_compile_args=["-O3"],
                # no compiler: a warning, and the package without it (not a failed install)
                optional=True,
            )
        ],
        cmdclass={"build_ext": build_ext},
    )

"""Build the grid world against an installed fastvec (needs Cython and a C compiler):

    python setup.py build_ext --inplace        # then: import gridworld
    pip install --no-build-isolation .         # or install it (fastvec is needed at build time)
"""
import fastvec
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    name="gridworld",
    version="0.1.0",
    packages=["gridworld"],
    package_data={"gridworld": ["*.h", "*.pyx"]},
    ext_modules=cythonize(
        [Extension("gridworld._kernel", ["gridworld/_kernel.pyx"],
                   include_dirs=[fastvec.get_include(), numpy.get_include()])],
        language_level=3,
    ),
)

"""The one thing pyproject.toml cannot say: the packages, found rather than listed.

pyproject.toml maps the `torchport` package to this folder; setuptools' find cannot
prefix what it finds, so it is done here. Only the product folders are searched, so
tests/, benchmarks/, scripts/ and examples/ never reach a wheel.
"""

from setuptools import find_packages, setup

PRODUCT = ("agents", "tools", "sandbox", "evals", "prompts", "cli")

FOUND = find_packages(include=[pattern for top in PRODUCT for pattern in (top, f"{top}.*")])

setup(packages=[f"torchport.{name}" for name in FOUND])

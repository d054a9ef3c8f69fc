# Metadata lives in pyproject.toml; this file exists for tools that still call setup.py.
from setuptools import setup

setup()

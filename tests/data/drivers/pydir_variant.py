"""Loads examples/python/sandboxer-driver-pydir as a module, so that a test driver can be pydir
with one part broken on purpose (the conformance kit must catch each)."""
import importlib.machinery
import importlib.util
import os


def load(name):
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "..", "examples", "python", "sandboxer-driver-pydir")
    loader = importlib.machinery.SourceFileLoader("pydir", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("pydir", loader))
    loader.exec_module(module)
    module.NAME = name
    return module

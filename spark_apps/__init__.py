"""The shipped apps, one folder each: entry point, spec, topology, generator, reference
model, drill model, demo.

Importable from the repository root (``python -m spark_apps.<app>.generator``, the tests);
the library (``statekeeper``) never imports them: the ``statekeeper`` command imports the
files a spec names (``generator:``, ``drill_model:``) by path.
"""

"""The shipped apps, one folder each: entry point, spec, topology, generator, reference model.

Importable from the repository root (``python -m spark_apps.<app>.generator``, the tests);
the library (``statekeeper``) never imports them.
"""

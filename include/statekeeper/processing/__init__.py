"""The processing core: topology, Processor API, DSL, processors and the stream task.

Plain Python: nothing here imports pyspark or airflow, so a topology runs and is tested in
a plain process (a stream task processes a batch of consumed records against its stores).
It builds on ``stores``, ``changelog``, ``state`` and ``kafka`` only
(``tests/unit/test_layering.py``).
"""

"""The "State stores" page of the Airflow UI: a FastAPI app (:mod:`.web_app`) serving the page,
its JSON API and the drill reports behind Airflow's own auth, with its nav entry; and the
drill operator's report link (:mod:`.links`). The ``airflow.plugins`` entry point registers
them with Airflow (:mod:`.airflow_plugin`; the repo's ``plugins/`` folder holds only a
shim). Nothing is imported here: the drill operator (imported by DAG files) needs only
:mod:`.links`, not FastAPI."""

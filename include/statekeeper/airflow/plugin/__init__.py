"""The "State stores" page of the Airflow UI: a FastAPI app (:mod:`.web_app`) serving the page,
its JSON API and the drill reports behind Airflow's own auth, with its nav entry; and the
drill operator's report link (:mod:`.links`). ``plugins/statekeeper_plugin.py`` registers
them with Airflow. Nothing is imported here: the drill operator (imported by DAG files)
needs only :mod:`.links`, not FastAPI."""

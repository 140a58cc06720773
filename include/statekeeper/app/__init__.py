"""App control on the driver: the app class, batch planning, lifecycle states, status
endpoint, app specs and the launcher."""

"""Changelog audits: each changelog topic's configs against what statekeeper expects,
measured contents, a restore-time forecast, a verdict per topic, and safe config fixes."""

"""The Jupyter server of tests/server (raylab enabled, several users), for the attacks on
the REST API."""

from tests.server.conftest import *  # noqa: F403

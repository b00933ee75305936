"""The Jupyter server of tests/server (raylab enabled, several users), for the export API."""

from tests.server.conftest import *  # noqa: F403

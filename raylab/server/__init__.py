"""Jupyter server extension: raylab's REST API and live events under `<base_url>raylab/`."""

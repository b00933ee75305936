"""Ray Serve on raylab clusters: each cluster's own port, its apps as the dashboard lists
them, and the paths through Jupyter that reach them (server/serve_proxy.py)."""

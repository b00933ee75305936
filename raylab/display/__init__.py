"""What a user reads in a notebook or a terminal: the words and tables for clusters
(render.py, which the sidebar's render.ts mirrors) and the live status card (widgets.py)."""

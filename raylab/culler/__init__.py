"""Idle suspension and GPU-hours: pure rules, one sweep, and the `raylab culler` service.

`sweep.Culler.sweep` is the one function the server extension, a JupyterHub service and a
Deployment all call; everything it decides is stored on the clusters themselves.
"""

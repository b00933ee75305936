"""A notebook cell run as a Ray Job on a cluster: the script it becomes (script.py), the
value it sends back (result.py) and the cluster's job API (api.py). The verbs are in
commands/jobs.py."""

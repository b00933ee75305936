"""The kernel's side of a cluster: connect this process to it (a direct driver, a joined
node for a kernel in a pod, Ray Client for a laptop), ship the notebook's live code with
its tasks, and watch the connection. Only the magics and the verbs import it."""

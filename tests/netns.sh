#!/bin/sh
# Run a command in a new network namespace that holds only loopback, when this machine
# lets us make one (root, or unprivileged user namespaces); else run it as it is.
# Ray then binds and advertises 127.0.0.1 only, and nothing in the tests can reach
# beyond this machine.
if [ -z "$RAYLAB_NO_NETNS" ] && unshare --net true 2>/dev/null; then
  exec unshare --net sh -c 'ip link set lo up && exec "$@"' netns "$@"
fi
exec "$@"

#!/bin/sh
# Run a command in a new network namespace that holds only loopback, so that Ray binds
# and advertises 127.0.0.1 only and nothing in the tests can reach beyond this machine.
# It needs root, or unprivileged user namespaces (then as a mapped root). Where neither
# is allowed it stops and says so; RAYLAB_NO_NETNS=1 runs without isolation on purpose.
if [ -n "$RAYLAB_NO_NETNS" ]; then
  echo "netns.sh: RAYLAB_NO_NETNS is set: running WITHOUT network isolation" >&2
  exec "$@"
fi
for how in "unshare --net" "unshare --net --map-root-user"; do
  if $how true 2>/dev/null; then
    exec $how sh -c 'ip link set lo up && exec "$@"' netns "$@"
  fi
done
echo "netns.sh: cannot make a network namespace here (needs root or unprivileged user" \
  "namespaces); run as root, or set RAYLAB_NO_NETNS=1 to run without isolation" >&2
exit 1

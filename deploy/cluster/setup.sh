#!/bin/sh
# Render jobtap's Redis Cluster configuration, one directory per node (run once,
# on the admin host; then copy each node's directory to its host, same path):
#
#   deploy/cluster/setup.sh DIR HOST:PORT HOST:PORT ...   (six or more: 3 primaries + 3 replicas)
#
# For each node, DIR/HOST-PORT/ gets jobtap.conf (deploy/redis/jobtap.conf: bind,
# port, ACL file, limits), cluster.conf and users.acl: the default user off,
# `admin` (for `jobtap acl` and redis-cli) and `replica` (replicas logging in to
# their primary), with the same passwords on every node, since `jobtap acl` logs
# in to every node as admin and any replica may become a primary.
#
# DIR/secrets/ (mode 0700) gets admin.env (JOBTAP_ADMIN_REDIS for `jobtap acl`)
# and create-cluster.sh, which joins the nodes once they run:
#   redis-cli --cluster create HOST:PORT... --cluster-replicas 1
# Existing users.acl files are kept (they hold the users `jobtap acl` made).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: setup.sh DIR HOST:PORT HOST:PORT ...}
shift
[ "$#" -ge 6 ] || { echo "setup.sh: give at least six nodes (3 primaries, 3 replicas)" >&2; exit 2; }
umask 077
mkdir -p "$dir/secrets"
dir=$(cd "$dir" && pwd)

secret() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
if [ -e "$dir/secrets/passwords" ]; then
    . "$dir/secrets/passwords"
else
    admin_pw=$(secret)
    replica_pw=$(secret)
    printf 'admin_pw=%s\nreplica_pw=%s\n' "$admin_pw" "$replica_pw" > "$dir/secrets/passwords"
fi

for node in "$@"; do
    host=${node%:*}
    port=${node##*:}
    nd="$dir/$host-$port"
    mkdir -p "$nd"
    sed -e "s|@BIND_ADDRESS@|$host|" -e "s|@PORT@|$port|g" -e "s|@ACLFILE@|$nd/users.acl|" \
        "$here/../redis/jobtap.conf" > "$nd/jobtap.conf"
    sed -e "s|@DIR@|$nd|g" -e "s|@REPLICA_PASSWORD@|$replica_pw|" \
        "$here/cluster.conf" > "$nd/cluster.conf"
    if [ ! -e "$nd/users.acl" ]; then
        sed -e "s|@ADMIN_PASSWORD_SHA256@|$(sha "$admin_pw")|" "$here/../redis/users.acl" \
            > "$nd/users.acl"
        printf 'user replica on #%s -@all +psync +replconf +ping\n' "$(sha "$replica_pw")" \
            >> "$nd/users.acl"
    fi
    if id redis >/dev/null 2>&1; then
        chown -R redis:redis "$nd"
    fi
done

first=$1
printf 'JOBTAP_ADMIN_REDIS=redis://admin:%s@%s/0\n' "$admin_pw" "$first" > "$dir/secrets/admin.env"
{
    echo '#!/bin/sh'
    echo '# Join the nodes into one cluster: three primaries, one replica each (run once).'
    echo "exec redis-cli --user admin --pass '$admin_pw' --no-auth-warning \\"
    echo "    --cluster create $* --cluster-replicas 1 --cluster-yes"
} > "$dir/secrets/create-cluster.sh"
chmod 700 "$dir/secrets/create-cluster.sh"
echo "setup.sh: $# nodes in $dir; admin credentials in $dir/secrets/admin.env" >&2

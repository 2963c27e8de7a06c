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
#
# $JOBTAP_TLS_DIR: the nodes serve TLS only, to clients, to their replicas
# (tls-replication) and on the cluster bus (tls-cluster): each node also gets
# tls.conf (deploy/redis/tls.conf) with the certificates of that directory
# (ca.crt, and redis.crt/redis.key naming every node's host: deploy/redis/
# make-certs.sh DIR server redis HOST...), and admin.env and create-cluster.sh
# use TLS.  $JOBTAP_TLS_AUTH_CLIENTS: yes, optional (default) or no; with yes,
# admin.env and create-cluster.sh present TLS_DIR/admin.crt and admin.key.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: setup.sh DIR HOST:PORT HOST:PORT ...}
shift
[ "$#" -ge 6 ] || { echo "setup.sh: give at least six nodes (3 primaries, 3 replicas)" >&2; exit 2; }
umask 077
mkdir -p "$dir/secrets"
dir=$(cd "$dir" && pwd)

tls_dir=${JOBTAP_TLS_DIR:-}
auth_clients=${JOBTAP_TLS_AUTH_CLIENTS:-optional}
scheme=redis query= cli_tls=
if [ -n "$tls_dir" ]; then
    case $auth_clients in yes | optional | no) ;; *)
        echo "setup.sh: JOBTAP_TLS_AUTH_CLIENTS is yes, optional or no" >&2; exit 2 ;;
    esac
    for f in ca.crt redis.crt redis.key; do
        [ -e "$tls_dir/$f" ] || { echo "setup.sh: no $tls_dir/$f (deploy/redis/make-certs.sh)" >&2; exit 2; }
    done
    scheme=rediss
    query="?ssl_ca_certs=$tls_dir/ca.crt"
    cli_tls="--tls --cacert '$tls_dir/ca.crt'"
    if [ "$auth_clients" = yes ]; then
        query="$query&ssl_certfile=$tls_dir/admin.crt&ssl_keyfile=$tls_dir/admin.key"
        cli_tls="$cli_tls --cert '$tls_dir/admin.crt' --key '$tls_dir/admin.key'"
    fi
fi

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
    if [ -n "$tls_dir" ]; then
        {
            sed -e "s|@PORT@|$port|g" -e "s|@TLS_DIR@|$tls_dir|g" \
                -e "s|@TLS_AUTH_CLIENTS@|$auth_clients|" "$here/../redis/tls.conf"
            printf '\n# A Redis Cluster node: replication and the cluster bus over TLS too.\n'
            printf 'tls-replication yes\ntls-cluster yes\n'
        } > "$nd/tls.conf"
    fi
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
printf 'JOBTAP_ADMIN_REDIS=%s://admin:%s@%s/0%s\n' "$scheme" "$admin_pw" "$first" "$query" \
    > "$dir/secrets/admin.env"
{
    echo '#!/bin/sh'
    echo '# Join the nodes into one cluster: three primaries, one replica each (run once).'
    echo "exec redis-cli $cli_tls${cli_tls:+ }--user admin --pass '$admin_pw' --no-auth-warning \\"
    echo "    --cluster create $* --cluster-replicas 1 --cluster-yes"
} > "$dir/secrets/create-cluster.sh"
chmod 700 "$dir/secrets/create-cluster.sh"
echo "setup.sh: $# nodes in $dir; admin credentials in $dir/secrets/admin.env" >&2

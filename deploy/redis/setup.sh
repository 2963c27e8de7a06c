#!/bin/sh
# Render jobtap's Redis configuration for a site (run once, as root):
#
#   deploy/redis/setup.sh ADDRESS [CONF_DIR [SECRETS_DIR]]
#
# ADDRESS   what Redis binds to, e.g. "10.1.2.3" or "10.1.2.3 127.0.0.1"
# CONF_DIR  where jobtap.conf and users.acl go (default /etc/redis)
# SECRETS_DIR where admin.env goes (default /etc/jobtap); it holds
#           JOBTAP_ADMIN_REDIS=redis://admin:PASSWORD@ADDRESS:PORT/0 for `jobtap acl`
# $JOBTAP_REDIS_PORT  the port (default 6379)
# $JOBTAP_TLS_DIR     serve TLS only: also render CONF_DIR/tls.conf with the
#                     certificates of this directory (ca.crt, redis.crt,
#                     redis.key: deploy/redis/make-certs.sh), and give admin.env
#                     a rediss:// URL; include tls.conf after jobtap.conf
# $JOBTAP_TLS_AUTH_CLIENTS  yes, optional (default) or no: whether every client
#                     must present a certificate; with yes, admin.env names
#                     TLS_DIR/admin.crt and admin.key (make-certs.sh DIR client admin)
#
# An existing users.acl is kept (it holds the users `jobtap acl` made): delete it
# to start over.  Then add `include CONF_DIR/jobtap.conf` at the end of
# redis.conf, restart Redis and run `jobtap acl sync` (see docs/security.md).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
addr=${1:?usage: setup.sh ADDRESS [CONF_DIR [SECRETS_DIR]]}
conf_dir=${2:-/etc/redis}
secrets_dir=${3:-/etc/jobtap}
port=${JOBTAP_REDIS_PORT:-6379}
umask 077
mkdir -p "$conf_dir" "$secrets_dir"

sed -e "s|@BIND_ADDRESS@|$addr|" -e "s|@PORT@|$port|g" -e "s|@ACLFILE@|$conf_dir/users.acl|" \
    "$here/jobtap.conf" > "$conf_dir/jobtap.conf"
chmod 644 "$conf_dir/jobtap.conf"

tls_dir=${JOBTAP_TLS_DIR:-}
auth_clients=${JOBTAP_TLS_AUTH_CLIENTS:-optional}
scheme=redis
query=
if [ -n "$tls_dir" ]; then
    case $auth_clients in yes | optional | no) ;; *)
        echo "setup.sh: JOBTAP_TLS_AUTH_CLIENTS is yes, optional or no" >&2; exit 2 ;;
    esac
    for f in ca.crt redis.crt redis.key; do
        [ -e "$tls_dir/$f" ] || { echo "setup.sh: no $tls_dir/$f (deploy/redis/make-certs.sh)" >&2; exit 2; }
    done
    sed -e "s|@PORT@|$port|g" -e "s|@TLS_DIR@|$tls_dir|g" -e "s|@TLS_AUTH_CLIENTS@|$auth_clients|" \
        "$here/tls.conf" > "$conf_dir/tls.conf"
    chmod 644 "$conf_dir/tls.conf"
    if id redis >/dev/null 2>&1; then
        chown redis:redis "$tls_dir/redis.key"
    fi
    scheme=rediss
    query="?ssl_ca_certs=$tls_dir/ca.crt"
    if [ "$auth_clients" = yes ]; then
        query="$query&ssl_certfile=$tls_dir/admin.crt&ssl_keyfile=$tls_dir/admin.key"
    fi
    echo "setup.sh: TLS on port $port only ($conf_dir/tls.conf: include it after jobtap.conf)" >&2
fi

if [ -e "$conf_dir/users.acl" ]; then
    echo "setup.sh: keeping $conf_dir/users.acl" >&2
else
    password=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    hash=$(printf %s "$password" | sha256sum | cut -d' ' -f1)
    sed -e "s|@ADMIN_PASSWORD_SHA256@|$hash|" "$here/users.acl" > "$conf_dir/users.acl"
    host=${addr%% *}
    case "$host" in
        0.0.0.0 | '*' | '::' | '-'*) host=127.0.0.1 ;;
        *:*) host="[$host]" ;;
    esac
    printf 'JOBTAP_ADMIN_REDIS=%s://admin:%s@%s:%s/0%s\n' "$scheme" "$password" "$host" "$port" \
        "$query" > "$secrets_dir/admin.env"
    echo "setup.sh: admin credentials in $secrets_dir/admin.env (mode 0600)" >&2
fi
if id redis >/dev/null 2>&1; then
    chown redis:redis "$conf_dir/users.acl"
fi

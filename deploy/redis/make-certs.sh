#!/bin/sh
# Certificates for jobtap's Redis over TLS, with openssl (run on an admin host;
# keep DIR/ca.key off the Redis hosts):
#
#   deploy/redis/make-certs.sh DIR ca                    # once: DIR/ca.crt, DIR/ca.key
#   deploy/redis/make-certs.sh DIR server NAME HOST...   # DIR/NAME.crt, DIR/NAME.key for a
#                                                        # Redis server known by these host
#                                                        # names and addresses
#   deploy/redis/make-certs.sh DIR client NAME           # DIR/NAME.crt, DIR/NAME.key: a client
#                                                        # certificate (CN=NAME) for a service
#                                                        # (writer, poker...) or a user
#
# Clients check the server's certificate against ca.crt and the name in their
# URL, so give `server` every name and address clients use (e.g. redis1
# redis1.example.org 10.1.2.3).  A server certificate also serves as a client
# one, as Redis presents it to its primary (tls-replication) and to the other
# nodes (tls-cluster).  EC P-256 keys; $JOBTAP_CERT_DAYS days (default 397 for
# servers and clients, 3650 for the CA).  An existing CA is kept; other files
# are replaced (that is how a certificate is renewed: see deploy/redis/README.md).
set -eu
dir=${1:?usage: make-certs.sh DIR ca|server NAME HOST...|client NAME}
what=${2:?usage: make-certs.sh DIR ca|server NAME HOST...|client NAME}
umask 077
mkdir -p "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

case $what in
ca)
    if [ -e "$dir/ca.key" ]; then
        echo "make-certs.sh: keeping the CA in $dir" >&2
        exit 0
    fi
    key "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -out "$dir/ca.crt" -days "${JOBTAP_CERT_DAYS:-3650}" \
        -subj "/CN=jobtap Redis CA" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
    chmod 644 "$dir/ca.crt"
    echo "make-certs.sh: CA in $dir/ca.crt (keep ca.key safe)" >&2
    ;;
server | client)
    name=${3:?usage: make-certs.sh DIR $what NAME ...}
    shift 3
    [ -e "$dir/ca.key" ] || { echo "make-certs.sh: no CA in $dir: run 'make-certs.sh $dir ca' first" >&2; exit 2; }
    ext=$(mktemp)
    trap 'rm -f "$ext" "$dir/$name.csr"' EXIT
    if [ "$what" = server ]; then
        [ "$#" -ge 1 ] || { echo "make-certs.sh: name the server's hosts and addresses" >&2; exit 2; }
        sans=
        for h in "$@"; do
            case $h in
                *[!0-9.]* | '') case $h in *:*) entry="IP:$h" ;; *) entry="DNS:$h" ;; esac ;;
                *) entry="IP:$h" ;;
            esac
            sans=${sans:+$sans,}$entry
        done
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" > "$ext"
    else
        printf 'extendedKeyUsage=clientAuth\n' > "$ext"
    fi
    printf 'keyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n' >> "$ext"
    key "$dir/$name.key.new"
    openssl req -new -key "$dir/$name.key.new" -out "$dir/$name.csr" -subj "/CN=$name"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -out "$dir/$name.crt.new" -days "${JOBTAP_CERT_DAYS:-397}" \
        -extfile "$ext" 2>/dev/null
    mv "$dir/$name.key.new" "$dir/$name.key"
    mv "$dir/$name.crt.new" "$dir/$name.crt"
    chmod 644 "$dir/$name.crt"
    echo "make-certs.sh: $dir/$name.crt and $dir/$name.key (mode 0600)" >&2
    ;;
*)
    echo "make-certs.sh: ca, server or client, not '$what'" >&2
    exit 2
    ;;
esac

# Shell functions shared by the scripts that start a Slurm on this host
# (start.sh, debian13/start.sh, run-from-source.sh), sourced, never run.  They
# use the sourcing script's `say` and `die`, and `TIMEOUT` (seconds per daemon).

tail_log() { [ -f "$1" ] && tail -n "${2:-15}" "$1" | sed 's/^/    | /' >&2 || true; }

# host_apt ARGS...: apt-get ARGS on the host, one at a time.  make test starts
# the two Slurms from two xdist groups side by side, and on a fresh machine both
# scripts install packages on the host (22.05's, the 24.11 root's debootstrap and
# MariaDB): an apt-get that finds dpkg's lock taken fails at once ("Could not get
# lock /var/lib/dpkg/lock-frontend"), and every Slurm test of that cluster with
# it.  flock makes these scripts wait for each other; DPkg::Lock::Timeout makes
# apt wait for any other apt.
host_apt() {
    flock -w 1200 /run/lock/jobtap-slurm-apt.lock \
        env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

# Close every descriptor above 2 (a daemon must not keep a caller's pipe, or a
# lock file that `flock FILE start.sh` holds, open for the rest of its life).
close_fds() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        case $fd in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
    done
}

# MYSQL_ADMIN: root through the socket (Debian: unix_socket authentication),
# else TCP without password; false if neither answers.
mysql_admin() {
    if mysql -uroot -e 'SELECT 1' >/dev/null 2>&1; then
        MYSQL_ADMIN="mysql -uroot"
    elif mysql -uroot -h127.0.0.1 -P3306 -e 'SELECT 1' >/dev/null 2>&1; then
        MYSQL_ADMIN="mysql -uroot -h127.0.0.1 -P3306"
    else
        return 1
    fi
}

# host_mariadb LOGDIR PIDDIR: the host's MariaDB on 127.0.0.1:3306 answers root,
# MYSQL_ADMIN set.  If nothing answers, it is started by hand (its data
# directory initialised if need be), detached, its log in LOGDIR, its pid in
# PIDDIR/mariadbd.pid, and PIDDIR/started-mariadbd tells the stop script that it
# stops it.
host_mariadb() {
    local logdir=$1 piddir=$2 datadir=/var/lib/mysql deadline
    mysql_admin && return 0
    if [ ! -d "$datadir/mysql" ]; then
        say "initialising the MariaDB data directory $datadir"
        mkdir -p "$datadir"
        chown mysql:mysql "$datadir"
        mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db \
            >>"$logdir/mariadb-install.log" 2>&1 || {
            tail_log "$logdir/mariadb-install.log"
            die "mariadb-install-db failed"
        }
    fi
    mkdir -p /run/mysqld
    chown mysql:mysql /run/mysqld
    say "starting mariadbd"
    (
        close_fds
        exec setsid /usr/sbin/mariadbd --user=mysql --datadir="$datadir" \
            --socket=/run/mysqld/mysqld.sock --pid-file=/run/mysqld/jobtap-mariadbd.pid \
            --bind-address=127.0.0.1 --port=3306 </dev/null >>"$logdir/mariadbd.log" 2>&1
    ) &
    touch "$piddir/started-mariadbd"
    deadline=$(($(date +%s) + TIMEOUT))
    until mysql_admin; do
        [ "$(date +%s)" -lt "$deadline" ] || {
            tail_log "$logdir/mariadbd.log"
            die "mariadbd did not accept connections within ${TIMEOUT}s"
        }
        sleep 0.3
    done
    # mariadbd runs as mysql, which may not write PIDDIR: its pid file is in
    # /run/mysqld, copied where the stop script looks.
    cp /run/mysqld/jobtap-mariadbd.pid "$piddir/mariadbd.pid"
}

# accounting_db NAME USER PASSWORD: slurmdbd's database and its user, on
# localhost and 127.0.0.1 (after host_mariadb).
accounting_db() {
    $MYSQL_ADMIN <<EOF || die "could not create the accounting database $1 (as $MYSQL_ADMIN)"
CREATE DATABASE IF NOT EXISTS $1;
CREATE USER IF NOT EXISTS '$2'@'localhost' IDENTIFIED BY '$3';
CREATE USER IF NOT EXISTS '$2'@'127.0.0.1' IDENTIFIED BY '$3';
GRANT ALL ON $1.* TO '$2'@'localhost';
GRANT ALL ON $1.* TO '$2'@'127.0.0.1';
EOF
}

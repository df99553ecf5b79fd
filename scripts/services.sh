#!/usr/bin/env bash
# Check that PostgreSQL (5432), PgBouncer (6432, transaction pooling in front of that
# PostgreSQL), Redis (6379) and RabbitMQ (5672) answer on 127.0.0.1; start any that does
# not (with the commands this project's machines use; PgBouncer is installed with apt-get
# if missing), and fail loudly if one still does not answer. Idempotent: a service that
# answers is left as it is.
set -uo pipefail

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

start_postgres() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start; }
start_redis() { redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log; }
start_rabbitmq() { rabbitmq-server -detached; }

# PgBouncer for the tests and bench/pgbouncer.py: pool_mode = transaction, trust auth as
# the local server has, in front of 127.0.0.1:5432. Debian's 1.18 passes no search_path
# to the server (no track_extra_parameters before 1.20), so the tests' schemas are fixed
# slots: database ck_pgb_N is the database "test" with search_path ck_pgb_N (set by
# connect_query on every server connection); tests/conftest.py takes a free slot (an
# advisory lock) and creates the schema. Any other database name goes to the same name
# on 5432. Its files live in $PGBOUNCER_DIR; the admin console (database "pgbouncer")
# takes user postgres.
PGBOUNCER_DIR=${CHATKEEP_PGBOUNCER_DIR:-/tmp/chatkeep-pgbouncer}
PGBOUNCER_SLOTS=32

write_pgbouncer_config() {
    mkdir -p "$PGBOUNCER_DIR"
    {
        echo "[databases]"
        for i in $(seq 0 $((PGBOUNCER_SLOTS - 1))); do
            echo "ck_pgb_$i = host=127.0.0.1 port=5432 dbname=test connect_query='SET search_path TO ck_pgb_$i'"
        done
        echo "* = host=127.0.0.1 port=5432"
        cat <<INI
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
unix_socket_dir =
auth_type = trust
auth_file = $PGBOUNCER_DIR/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
server_idle_timeout = 10
ignore_startup_parameters = extra_float_digits
logfile = $PGBOUNCER_DIR/pgbouncer.log
pidfile = $PGBOUNCER_DIR/pgbouncer.pid
INI
    } >"$PGBOUNCER_DIR/pgbouncer.ini"
    echo '"postgres" ""' >"$PGBOUNCER_DIR/userlist.txt"
    chown -R postgres: "$PGBOUNCER_DIR"
}

start_pgbouncer() {
    if ! command -v pgbouncer >/dev/null; then
        echo "services: installing pgbouncer (apt-get)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null 2>&1 \
            || { apt-get update >/dev/null 2>&1 \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null 2>&1; }
    fi
    write_pgbouncer_config
    # A stale pid file (a pgbouncer that died) would stop the new one from starting.
    rm -f "$PGBOUNCER_DIR/pgbouncer.pid"
    pgbouncer -d -u postgres "$PGBOUNCER_DIR/pgbouncer.ini"
}

# Beyond its port answering: a query through it reaches PostgreSQL with the slot's
# search_path (so a bouncer with another configuration on 6432 does not pass).
pgbouncer_works() {
    [ "$(timeout 5 psql -h 127.0.0.1 -p 6432 -U postgres -d ck_pgb_0 -XAtc 'SHOW search_path' \
        2>/dev/null)" = "ck_pgb_0" ]
}

# Chromium for the inspector's browser tests (tests/inspect): Debian's package, driven by
# Playwright through executable_path (`playwright install` downloads a browser build).
if ! command -v chromium >/dev/null && ! command -v chromium-headless-shell >/dev/null; then
    echo "services: installing chromium (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null 2>&1; } \
        || echo "services: could not install chromium (the browser tests need it)" >&2
fi

status=0
for spec in "PostgreSQL 5432 start_postgres" "PgBouncer 6432 start_pgbouncer" \
        "Redis 6379 start_redis" "RabbitMQ 5672 start_rabbitmq"; do
    set -- $spec
    name=$1 port=$2 starter=$3
    if ! answers "$port"; then
        echo "services: $name is not answering on 127.0.0.1:$port; starting it" >&2
        $starter >/dev/null 2>&1 || true
        for _ in $(seq 1 60); do answers "$port" && break; sleep 1; done
    fi
    if answers "$port"; then
        echo "services: $name answers on 127.0.0.1:$port"
    else
        echo "services: FATAL: $name does not answer on 127.0.0.1:$port" >&2
        status=1
        continue
    fi
    if [ "$name" = PgBouncer ] && ! pgbouncer_works; then
        echo "services: FATAL: PgBouncer on 127.0.0.1:6432 does not serve database ck_pgb_0" \
            "with search_path ck_pgb_0 (not started by this script? see $PGBOUNCER_DIR)" >&2
        status=1
    fi
done
exit $status

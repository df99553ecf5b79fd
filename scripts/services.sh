#!/usr/bin/env bash
# Check that PostgreSQL (5432), Redis (6379) and RabbitMQ (5672) answer on 127.0.0.1;
# start any that does not (with the commands this project's machines use), and fail
# loudly if one still does not answer.
set -uo pipefail

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

start_postgres() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start; }
start_redis() { redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log; }
start_rabbitmq() { rabbitmq-server -detached; }

status=0
for spec in "PostgreSQL 5432 start_postgres" "Redis 6379 start_redis" "RabbitMQ 5672 start_rabbitmq"; do
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
    fi
done
exit $status

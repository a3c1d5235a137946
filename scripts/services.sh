#!/usr/bin/env bash
# Makes sure the Redis and PostgreSQL the real-service tests use are up on
# loopback, installing and starting them when missing. Does nothing to a
# service that already answers.
set -euo pipefail

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }
pg_up() { pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; }

apt_install() {
	if [ -z "${_apt_updated:-}" ]; then apt-get update -qq; _apt_updated=1; fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! redis_up; then
	command -v redis-server >/dev/null || apt_install redis-server
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
	for _ in $(seq 50); do redis_up && break; sleep 0.1; done
fi
redis_up && echo "redis: up on 127.0.0.1:6379" || echo "redis: not available; real-Redis tests will skip"

if ! pg_up; then
	if ! command -v pg_ctlcluster >/dev/null; then apt_install postgresql; fi
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
	for _ in $(seq 100); do pg_up && break; sleep 0.1; done
fi
pg_up && echo "postgres: up on 127.0.0.1:5432" || echo "postgres: not available; PostgreSQL tests will skip"

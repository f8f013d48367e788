#!/usr/bin/env bash
# Smoke tests for the test redis-server of scripts/services/redis.sh: what the
# Redis backend (issue #6) relies on, checked with redis-cli.
# Usage: redis_smoke_test.sh auth|restart
. "$(dirname "$0")/lib.sh"
need_service redis TANDEM_TEST_REDIS_PORT

cli() { redis-cli -h "$TANDEM_TEST_REDIS_HOST" -p "$TANDEM_TEST_REDIS_PORT" "$@"; }
# As the ACL user; the password travels in the environment, not on the command line.
acli() { REDISCLI_AUTH=$(<"$TANDEM_TEST_REDIS_PASSWORD_FILE") cli --user "$TANDEM_TEST_REDIS_USER" "$@"; }

# PING needs no password; data does; a wrong password is refused.
test_auth() {
  [[ "$(cli ping)" == PONG ]] || fail "redis-cli ping did not answer PONG"
  pass "ping -> PONG"
  local key=tandem:smoke:auth:$$
  [[ "$(acli set "$key" hello)" == OK ]] || fail "SET as $TANDEM_TEST_REDIS_USER failed"
  CLEANUPS+=("acli del $key >/dev/null")
  [[ "$(acli get "$key")" == hello ]] || fail "GET as $TANDEM_TEST_REDIS_USER failed"
  pass "authenticated SET/GET as $TANDEM_TEST_REDIS_USER"
  local out
  out=$(cli get "$key" 2>&1)
  [[ "$out" == *NOPERM* ]] || fail "unauthenticated GET was not refused: '$out'"
  pass "unauthenticated GET refused: $out"
  out=$(REDISCLI_AUTH=wrong cli --user "$TANDEM_TEST_REDIS_USER" get "$key" 2>&1)
  [[ "$out" == *WRONGPASS* && "$out" != *hello* ]] || fail "wrong password was not refused: '$out'"
  pass "wrong password refused"
}

# kill -9 of redis-server, then restart: acknowledged writes come back from the AOF.
test_restart() {
  local key=tandem:smoke:aof:$$ value=v$RANDOM$RANDOM
  [[ "$(acli set "$key" "$value")" == OK ]] || fail "SET failed"
  CLEANUPS+=("acli del $key >/dev/null")
  acli xadd "tandem:smoke:stream:$$" '*' field "$value" >/dev/null || fail "XADD failed"
  CLEANUPS+=("acli del tandem:smoke:stream:$$ >/dev/null")
  local pid
  pid=$(<"$TANDEM_TEST_REDIS_PIDFILE")
  kill -9 "$pid"
  wait_for 10 "redis-server $pid to die" bash -c "! kill -0 $pid"
  [[ "$(cli ping 2>&1)" != PONG ]] || fail "redis still answers after kill -9"
  "$TANDEM_TEST_REDIS_SCRIPT" restart
  local newpid
  newpid=$(<"$TANDEM_TEST_REDIS_PIDFILE")
  [[ "$newpid" != "$pid" ]] && kill -0 "$newpid" || fail "no new redis-server after restart"
  [[ "$(acli get "$key")" == "$value" ]] || fail "key lost after kill -9 + restart"
  [[ "$(acli xlen "tandem:smoke:stream:$$")" == 1 ]] || fail "stream entry lost after kill -9 + restart"
  pass "kill -9 pid=$pid, restart pid=$newpid: key and stream entry recovered from the AOF"
}

case "${1:-}" in
  auth | restart) "test_$1" ;;
  *) fail "unknown case '${1:-}'" ;;
esac

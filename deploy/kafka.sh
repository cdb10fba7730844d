#!/usr/bin/env bash
# A single-node Apache Kafka broker on 127.0.0.1 for weft's Kafka ordering
# (issue 22): KRaft mode, one process acting as broker and controller, built
# from Kafka's jars on Maven Central (no Docker image, no Debian package has
# a broker). Java and Maven are installed from Debian when missing.
#
#   deploy/kafka.sh start     # fetch the jars once, format, start, wait until it serves
#   deploy/kafka.sh status    # running or not (exit 1 when not)
#   deploy/kafka.sh check     # a record written with acks=all and read back
#   deploy/kafka.sh stop      # SIGTERM, then SIGKILL after 30 s
#   deploy/kafka.sh clean     # stop and delete the broker's data
#   deploy/kafka.sh fetch     # only fetch the jars; prints their folder
#   deploy/kafka.sh run       # format if new, then run the broker in the
#                             # foreground (a container's entry point)
#
# Settings (environment):
#   WEFT_KAFKA_DIR             the broker's config, data, log and pid
#                              [~/.cache/weft/kafka/run-<port>]
#   WEFT_KAFKA_PORT            client listener [9092]
#   WEFT_KAFKA_CONTROLLER_PORT KRaft controller listener [port + 1]
#   WEFT_KAFKA_VERSION         [3.9.2]
#   WEFT_KAFKA_HEAP            the JVM's largest heap [512m]
#   WEFT_KAFKA_WAIT            seconds to wait for the broker to serve [90]
#   WEFT_KAFKA_HOST            the address the client listener binds
#                              [127.0.0.1]; a container's broker binds
#                              0.0.0.0 on its own network
#   WEFT_KAFKA_ADVERTISED_HOST the name clients reach it by [the host]
#
# The jars of a version are kept in ~/.cache/weft/kafka/<version> and
# shared by every broker started from it.
set -euo pipefail

version=${WEFT_KAFKA_VERSION:-3.9.2}
port=${WEFT_KAFKA_PORT:-9092}
controller_port=${WEFT_KAFKA_CONTROLLER_PORT:-$((port + 1))}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/weft/kafka
jars=$cache/$version
dir=${WEFT_KAFKA_DIR:-$cache/run-$port}
heap=${WEFT_KAFKA_HEAP:-512m}
wait_seconds=${WEFT_KAFKA_WAIT:-90}
host=${WEFT_KAFKA_HOST:-127.0.0.1}
advertised_host=${WEFT_KAFKA_ADVERTISED_HOST:-$host}
# The controller listener is the broker's own business: loopback always.
controller_host=127.0.0.1

# Kafka 4 logs through log4j2, Kafka 3 through log4j 1's API (reload4j).
if ((${version%%.*} >= 4)); then
  logging_artifact='<groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.4</version>'
  logging_option=-Dlog4j2.configurationFile=$dir/log4j2.properties
else
  logging_artifact='<groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version>'
  logging_option=-Dlog4j.configuration=file:$dir/log4j.properties
fi

say() { printf 'kafka: %s\n' "$*"; }
fail() { printf 'kafka: error: %s\n' "$*" >&2; exit 1; }

install_tools() {
  # shellcheck source=deploy/packages.sh
  . "$(dirname "$0")/packages.sh"
  install_missing_packages java:default-jre-headless mvn:maven
}

# Kafka's jars and their dependencies, copied once from Maven Central.
fetch_jars() {
  [[ -f $jars/libs/.complete ]] && return 0
  install_tools
  say "fetching Kafka $version from Maven Central into $jars"
  mkdir -p "$jars"
  cat >"$jars/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weft.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <dependency>$logging_artifact</dependency>
  </dependencies>
</project>
EOF
  if ! (cd "$jars" && mvn -B -Dstyle.color=never -Dmaven.repo.local="$cache/maven" \
    dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime) \
    >"$jars/maven.log" 2>&1; then
    tail -20 "$jars/maven.log" >&2
    fail "Maven could not fetch Kafka $version (log: $jars/maven.log)"
  fi
  touch "$jars/libs/.complete"
}

write_config() {
  mkdir -p "$dir"
  # One node is broker and controller; nothing listens beyond 127.0.0.1
  # unless WEFT_KAFKA_HOST says so.
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$controller_host:$controller_port
listeners=PLAINTEXT://$host:$port,CONTROLLER://$controller_host:$controller_port
advertised.listeners=PLAINTEXT://$advertised_host:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
EOF
  cat >"$dir/log4j.properties" <<'EOF'
log4j.rootLogger=${weft.kafka.log.level}, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
  cat >"$dir/log4j2.properties" <<'EOF'
status = warn
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ${sys:weft.kafka.log.level:-INFO}
rootLogger.appenderRef.stderr.ref = STDERR
EOF
}

# Kafka's command-line tools, logging only warnings.
java_tool() { java -Dweft.kafka.log.level=WARN "$logging_option" -cp "$jars/libs/*" "$@"; }

running() { [[ -f $dir/broker.pid ]] && kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null; }

# The jars, Java, the config, and the data folder formatted once.
prepare() {
  fetch_jars
  command -v java >/dev/null || install_tools
  write_config
  if [[ ! -f $dir/data/meta.properties ]]; then
    local cluster
    cluster=$(java_tool kafka.tools.StorageTool random-uuid 2>/dev/null)
    java_tool kafka.tools.StorageTool format -t "$cluster" -c "$dir/server.properties" \
      >"$dir/format.log" 2>&1 || fail "formatting $dir/data failed: $(tail -5 "$dir/format.log")"
  fi
}

broker_command=(java -Xms128m -Xmx"$heap" -XX:+UseG1GC -Djava.awt.headless=true
  -Dweft.kafka.log.level=INFO "$logging_option"
  -cp "$jars/libs/*" kafka.Kafka "$dir/server.properties")

start() {
  if running; then
    say "already running on $host:$port (pid $(cat "$dir/broker.pid"))"
    return 0
  fi
  prepare
  nohup "${broker_command[@]}" >"$dir/broker.log" 2>&1 </dev/null &
  echo $! >"$dir/broker.pid"
  wait_until_serving
}

wait_until_serving() {
  local deadline=$((SECONDS + wait_seconds))
  while ((SECONDS < deadline)); do
    if ! running; then
      tail -20 "$dir/broker.log" >&2
      fail "the broker exited while starting (log: $dir/broker.log)"
    fi
    if grep -q 'Kafka Server started' "$dir/broker.log" 2>/dev/null &&
      (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
      say "Kafka $version ready on $host:$port (pid $(cat "$dir/broker.pid"), data $dir/data)"
      return 0
    fi
    sleep 0.2
  done
  fail "the broker did not serve within ${wait_seconds}s (log: $dir/broker.log)"
}

stop() {
  if ! running; then
    rm -f "$dir/broker.pid"
    say "not running"
    return 0
  fi
  local pid
  pid=$(cat "$dir/broker.pid")
  kill -TERM "$pid"
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "no exit 30 s after SIGTERM; killing $pid"
    kill -KILL "$pid"
  fi
  rm -f "$dir/broker.pid"
  say "stopped"
}

# Proves the running broker serves clients: creates a topic, writes a record
# that all in-sync replicas acknowledge, reads it back.
check() {
  running || fail "not running"
  local topic=weft-check-$$ record
  record="written at $(date +%s)"
  java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$host:$port" \
    --create --topic "$topic" --partitions 1 --replication-factor 1 >/dev/null
  printf '%s\n' "$record" | java_tool kafka.tools.ConsoleProducer \
    --bootstrap-server "$host:$port" --topic "$topic" --producer-property acks=all 2>/dev/null
  local read
  read=$(java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$host:$port" \
    --topic "$topic" --from-beginning --max-messages 1 --timeout-ms 30000 2>/dev/null)
  java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$host:$port" \
    --delete --topic "$topic" >/dev/null
  [[ $read == "$record" ]] || fail "wrote \"$record\" to $topic, read back \"$read\""
  say "a record written with acks=all to $topic was read back"
}

case ${1:-} in
start) start ;;
run)
  prepare
  say "Kafka $version on $host:$port, advertised as $advertised_host:$port, data $dir/data"
  exec "${broker_command[@]}"
  ;;
fetch)
  fetch_jars
  echo "$jars/libs"
  ;;
check) check ;;
stop) stop ;;
status)
  if running; then
    say "running on $host:$port (pid $(cat "$dir/broker.pid"))"
  else
    say "not running"
    exit 1
  fi
  ;;
clean)
  stop
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|status|check|stop|clean|fetch|run" >&2
  exit 2
  ;;
esac

# nats-server as a scratch image: the static binary `make build` builds from its Go module (CGO_ENABLED=0),
# the jetrl cluster configuration, and the health-check binary. Nothing is pulled.
#   docker build -f deploy/docker/nats-server.Dockerfile -t jetrl/nats-server:dev .
# Run one node of the 3-node cluster (peers are reached by the names nats-1, nats-2, nats-3):
#   docker run -e NATS_SERVER_NAME=nats-1 --network-alias nats-1 -v nats-1:/data jetrl/nats-server:dev
# Or a single node without a cluster: ... jetrl/nats-server:dev -c /etc/nats/single.conf
FROM scratch
COPY bin/nats-server /nats-server
COPY bin/jetrl-healthcheck /jetrl-healthcheck
COPY deploy/nats/cluster.conf /etc/nats/cluster.conf
COPY deploy/nats/container-single.conf /etc/nats/single.conf
# 4222 clients, 6222 cluster routes, 8222 HTTP monitoring (/healthz, /varz, /jsz).
EXPOSE 4222 6222 8222
VOLUME /data
# /healthz fails until JetStream is up and this node is current with the cluster's meta group.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=6 CMD ["/jetrl-healthcheck", "http://127.0.0.1:8222/healthz"]
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/cluster.conf"]

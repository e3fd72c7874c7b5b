# jetrl-replay-buffer as a scratch image: one static Go binary (CGO_ENABLED=0), no shell, no package manager.
# Built by `make images` from the repository root (context: bin/ is built on the host first; nothing is pulled):
#   docker build -f deploy/docker/replay-buffer.Dockerfile -t jetrl/replay-buffer:dev .
FROM scratch
COPY bin/jetrl-replay-buffer /jetrl-replay-buffer
# The health check: scratch has no curl, so a static binary GETs the /metrics endpoint.
COPY bin/jetrl-healthcheck /jetrl-healthcheck
ENV JETRL_METRICS_ADDR=:9090
EXPOSE 9090
USER 65534:65534
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/jetrl-healthcheck", "http://127.0.0.1:9090/metrics"]
ENTRYPOINT ["/jetrl-replay-buffer"]

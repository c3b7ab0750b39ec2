# Switchboard container images: a static binary, running as the non-root
# user 65532. Two targets:
#
#   default (the last stage): distroless, no shell. For the daemon with
#     HTTP MCP servers and no bash tool.
#   full: Debian slim with node, npm/npx, bash and bubblewrap, for stdio MCP
#     servers (command: npx ...) and the bash tool.
#
#   docker build -t switchboard .
#   docker build --target full -t switchboard:full .
#   export SWITCHBOARD_BUS_ADMIN_TOKEN=$(openssl rand -hex 32)
#   docker run --rm -e OPENAI_API_KEY -e SWITCHBOARD_BUS_ADMIN_TOKEN \
#     -p 127.0.0.1:9090:9090 -p 127.0.0.1:4222:4222 \
#     -v switchboard-data:/var/lib/switchboard switchboard
#   switchboard chat --url nats://$SWITCHBOARD_BUS_ADMIN_TOKEN@127.0.0.1:4222
#
# State (data_dir ./data and agent.workspace ./data/workspace, relative to the
# working directory) lives in the volume /var/lib/switchboard. The shipped
# config.yaml is at /etc/switchboard/config.yaml; mount your own folder there
# to replace it. The bus and admin listeners bind 0.0.0.0 inside the
# container through SWITCHBOARD_BUS_LISTEN and SWITCHBOARD_ADMIN_LISTEN,
# which the shipped config.yaml reads (outside a container they default to
# 127.0.0.1). The embedded NATS server accepts no anonymous client, and a
# listener on 0.0.0.0 needs the operators' credential bus.admin: the shipped
# config.yaml reads it from SWITCHBOARD_BUS_ADMIN_TOKEN, and without it the
# container exits at start with an error naming bus.admin and bus.listen
# (never an open bus). Bridges get their own credentials (bus.bridges).
#
# The bash tool's sandbox (bubblewrap) needs user namespaces, which Docker's
# default seccomp profile refuses: run the full image with
# --security-opt seccomp=unconfined (or a profile allowing unshare/clone of
# namespaces), or set tools.bash.sandbox: none and rely on the container
# alone (docs/tools.md). The deploy test (deploy/lint_test.go) lints this
# file; .ci/run builds both targets when a Docker engine is available.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/switchboard ./cmd/switchboard
# Folders the final stage copies with their owner, since distroless has no
# shell to create them.
RUN mkdir -p /out/state/data/workspace /out/etc \
	&& cp config.yaml /out/etc/config.yaml

# full: Debian slim with the programs stdio MCP servers and the bash tool
# run. Build it with --target full.
FROM debian:12-slim AS full
RUN apt-get update \
	&& apt-get install -y --no-install-recommends bash bubblewrap ca-certificates nodejs npm \
	&& rm -rf /var/lib/apt/lists/* \
	&& useradd --uid 65532 --user-group --home-dir /var/lib/switchboard --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /out/switchboard /usr/local/bin/switchboard
COPY --from=build /out/etc/config.yaml /etc/switchboard/config.yaml
COPY --from=build --chown=65532:65532 /out/state /var/lib/switchboard
ENV SWITCHBOARD_BUS_LISTEN=0.0.0.0:4222 \
	SWITCHBOARD_ADMIN_LISTEN=0.0.0.0:9090 \
	HOME=/var/lib/switchboard \
	npm_config_cache=/var/lib/switchboard/.npm
WORKDIR /var/lib/switchboard
USER 65532:65532
VOLUME ["/var/lib/switchboard", "/etc/switchboard"]
EXPOSE 4222 9090
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
	CMD ["switchboard", "healthcheck", "--url", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["switchboard", "serve", "--config", "/etc/switchboard/config.yaml"]

# default: distroless, no shell (the last stage is what `docker build`
# builds without --target).
FROM gcr.io/distroless/static-debian12:nonroot AS default
COPY --from=build /out/switchboard /usr/local/bin/switchboard
COPY --from=build /out/etc/config.yaml /etc/switchboard/config.yaml
COPY --from=build --chown=65532:65532 /out/state /var/lib/switchboard
ENV SWITCHBOARD_BUS_LISTEN=0.0.0.0:4222 \
	SWITCHBOARD_ADMIN_LISTEN=0.0.0.0:9090
WORKDIR /var/lib/switchboard
USER 65532:65532
VOLUME ["/var/lib/switchboard", "/etc/switchboard"]
# 4222: NATS clients (bridges, `switchboard chat`); 9090: GET /healthz, /readyz, /metrics.
EXPOSE 4222 9090
# No shell or curl in the image: the binary checks its own /healthz.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
	CMD ["switchboard", "healthcheck", "--url", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["switchboard", "serve", "--config", "/etc/switchboard/config.yaml"]

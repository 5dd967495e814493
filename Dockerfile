# syntax=docker/dockerfile:1
# MessageHub as a container: a static Go binary on distroless static, run as
# a non-root user, with the embedded store on the /data volume.
#
#   docker build -t messagehub .
#   docker run -p 50051:50051 -p 8080:8080 -v messagehub-data:/data \
#     -v "$PWD/jwks.json:/etc/messagehub/jwks.json:ro" \
#     -e MESSAGEHUB_JWKS_FILE=/etc/messagehub/jwks.json \
#     -e MESSAGEHUB_JWT_ISSUER=https://login.example/ \
#     -e MESSAGEHUB_JWT_AUDIENCE=messagehub \
#     messagehub
#
# The container listens on every interface, so it runs with --auth jwt and
# refuses to start until a JWKS file, an issuer and an audience are given
# (README.md, "Container").

# Base images are named by tag, not digest: digests cannot be looked up from
# the machines this is developed on (no registry access). Before building an
# image for production, pin both FROM lines with the digests your registry
# reports (`docker buildx imagetools inspect golang:1.26`), e.g.
# FROM golang:1.26@sha256:<digest>.
FROM docker.io/library/golang:1.26 AS build
WORKDIR /src
ENV GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# .git is not in the build context, so the version is stamped at link time:
#   docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t messagehub .
ARG VERSION=dev REVISION=unknown CREATED=unknown
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# test/e2e (TestBinaryBuildsAsTheDockerfileBuildsIt) runs this same command.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.stampedVersion=${VERSION} -X main.stampedRevision=${REVISION} -X main.stampedTime=${CREATED}" -o /out/messagehub ./cmd/messagehub
# An empty data folder, so that the volume starts owned by the runtime user.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev REVISION=unknown CREATED=unknown
LABEL org.opencontainers.image.title="messagehub" \
      org.opencontainers.image.description="MessageHub: DataAvailable notifications from domains, peeked and dequeued by market actors" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
COPY --from=build /out/messagehub /usr/local/bin/messagehub
COPY --from=build --chown=65532:65532 /out/data /data
# nonroot (65532) of the distroless image.
USER 65532:65532
ENV MESSAGEHUB_DATA_DIR=/data \
    MESSAGEHUB_GRPC_ADDR=0.0.0.0:50051 \
    MESSAGEHUB_HTTP_ADDR=0.0.0.0:8080 \
    MESSAGEHUB_AUTH=jwt
VOLUME ["/data"]
# gRPC (MessageHub, health, reflection) and HTTP (gateway, /healthz, /metrics).
EXPOSE 50051 8080
ENTRYPOINT ["/usr/local/bin/messagehub"]

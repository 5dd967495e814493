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

FROM golang:1.26 AS build
WORKDIR /src
ENV GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# test/e2e (TestBinaryBuildsAsTheDockerfileBuildsIt) runs this same command.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/messagehub ./cmd/messagehub
# An empty data folder, so that the volume starts owned by the runtime user.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
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

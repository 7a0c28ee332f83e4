# syntax=docker/dockerfile:1
#
# riskstream: the live job and its tools in one static binary.
#
#   docker build -t riskstream .
#   docker run --rm riskstream check /etc/riskstream/rules.yaml
#
# Stages: build (Go toolchain) -> runtime-debug (distroless + busybox shell,
# used by the compose "producer" profile to pipe gen into produce) -> runtime
# (the default, last stage: distroless static, no shell, non-root).

# The go line of go.mod, exactly: the golang images set GOTOOLCHAIN=local,
# so an older cached 1.26 image would refuse to build the module
# (deploy/deploy_test.go keeps the two equal).
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Module downloads first so they are cached apart from source edits.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Pebble and the rest build without cgo (checked with CGO_ENABLED=0 go build
# ./cmd/riskstream), so the binary is static and runs on distroless/static.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" \
      -o /riskstream ./cmd/riskstream \
 && /riskstream check testdata/rules.yaml \
 && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:debug-nonroot AS runtime-debug
COPY --from=build /riskstream /usr/local/bin/riskstream
COPY --from=build /src/testdata/rules.yaml /etc/riskstream/rules.yaml
COPY --from=build --chown=65532:65532 /out/state /var/lib/riskstream
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/riskstream"]

FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /riskstream /usr/local/bin/riskstream
COPY --from=build /src/testdata/rules.yaml /etc/riskstream/rules.yaml
# Owned by nonroot so a named volume mounted here starts writable.
COPY --from=build --chown=65532:65532 /out/state /var/lib/riskstream
USER 65532:65532
WORKDIR /var/lib/riskstream
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/riskstream"]
CMD ["run", "--rules", "/etc/riskstream/rules.yaml", "--state-dir", "/var/lib/riskstream", "--metrics-addr", ":9464"]

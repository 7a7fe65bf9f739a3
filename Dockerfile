# syntax=docker/dockerfile:1
# sweepd image: a static binary on distroless. The entry point is /cleanup,
# which is `sweepd cleanup`: spectro-cleanup's entry point, so that its
# manifests (args and no command, or neither) run unchanged. sweepd's other
# commands run as /sweepd <command>; the chart sets that command.
#
#   docker build -t ghcr.io/sweep-k8s/sweep:$(git describe --tags) \
#     --build-arg VERSION=$(git describe --tags) --build-arg REVISION=$(git rev-parse HEAD) .
#
# REVISION is sweep_build_info's revision: .git is not in the build context
# (.dockerignore), so the go command cannot record it.
#
# test/release/dockerfile_test.go runs this file's build command and checks /cleanup.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=devel
ARG REVISION=
WORKDIR /src
# Dependencies first: a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static (no cgo: distroless/static has no libc), reproducible paths.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X github.com/sweep-k8s/sweep/internal/version.version=${VERSION} -X github.com/sweep-k8s/sweep/internal/version.revision=${REVISION}" -o /out/sweepd ./cmd/sweepd && \
    ln -s sweepd /out/cleanup

# static-debian12 runs as root by default: the daemon needs uid 0 for the
# root-owned multus cache (the chart drops every capability). The uninstall
# hook Job sets its own non-root user.
FROM gcr.io/distroless/static-debian12
# COPY of a directory keeps the symlink: /cleanup -> sweepd, one binary.
COPY --from=build /out/ /
ENTRYPOINT ["/cleanup"]

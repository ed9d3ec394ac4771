# The manager image for those with a Docker engine. `make image` builds the
# same image (user, entrypoint, files) with none, as an OCI layout.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Copy the Go Modules manifests
COPY go.mod go.mod
COPY go.sum go.sum
# cache deps before building and copying source so that we don't need to re-download as much
# and so that source changes don't invalidate our downloaded layer
RUN go mod download

# Copy the go source
COPY cmd/ cmd/
COPY api/ api/
COPY internal/ internal/

# A static, stripped binary for the target platform (TARGETARCH is set by
# docker buildx; a plain docker build builds for the host).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o manager ./cmd

# distroless/static:nonroot holds what make image's base layer holds: passwd
# and group entries for nonroot (65532), CA certificates, /tmp and
# /home/nonroot.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532

ENTRYPOINT ["/manager"]

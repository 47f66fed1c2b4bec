# syntax=docker/dockerfile:1
# Build stage: the controller binary, the official KCL engine from npm (integrity-checked) and
# its Node-API stub library, built exactly as `make build` does on a laptop.
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm binutils openssl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
COPY api/ api/
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build build-plugin VERSION=${VERSION}

# Runtime: glibc (the engine is a glibc shared library), no shell tools beyond the base image,
# a non-root user. The binary finds libkcl.so and its KCL worker (kcl-worker) beside itself.
# flux-kcl, the flux CLI plugin of the same version, rides along for copying out (README "The
# flux kcl plugin").
FROM debian:bookworm-slim
COPY --from=build /src/bin/kcl-artifact-controller /src/bin/kcl-worker /src/bin/libkcl.so /src/bin/libnapistub.so /src/bin/flux-kcl /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kcl-artifact-controller"]
CMD ["run"]

# spindle serve in a small image: built in a Rust image, run as a non-root
# user on Debian slim. docs/deploy.md explains the image and the Kubernetes
# manifests in deploy/kubernetes/.
#
#   docker build -t spindle .
#   docker run -p 8080:8080 -p 9090:9090 spindle

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p spindle-cli \
 && install -D target/release/spindle /out/spindle

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin spindle
COPY --from=build /out/spindle /usr/local/bin/spindle
# The app: a manifest and its components (replace with your own, or mount
# a ConfigMap over /app/spindle.toml as deploy/kubernetes/ does).
COPY deploy/app/spindle.toml /app/spindle.toml
COPY guests/wasm/hello.wasm /app/hello.wasm
COPY guests/wasm/kv.wasm /app/kv.wasm
USER 10001
# What `spindle serve` serves and where, as environment variables so that a
# command line (`docker run spindle serve other.wasm`, a Kubernetes
# `args:`) replaces only what it names. Compiled components are cached in
# /tmp (writable even on a read-only root filesystem; `off` compiles at
# every start).
ENV SPINDLE_LISTEN=0.0.0.0:8080 \
    SPINDLE_ADMIN=0.0.0.0:9090 \
    SPINDLE_APP=/app/spindle.toml \
    SPINDLE_CACHE_DIR=/tmp/spindle-cache
EXPOSE 8080 9090
# `docker run spindle` serves; `docker run spindle run cmd.wasm` runs a
# command. Kubernetes `args:` replace CMD, `command:` replaces ENTRYPOINT.
ENTRYPOINT ["spindle"]
CMD ["serve"]

# The pallet agent image: `docker build -t <registry>/pallet:<tag> .`, then point deploy/ at it
# (`cd deploy && kustomize edit set image pallet=<registry>/pallet:<tag>`).
#
# NOT BUILT IN THIS PROJECT'S CI: the development machines have no docker. The stages below follow
# what the binary links (checked with ldd on a local build): libgit2 and libssh2 are compiled in
# (vendored by their -sys crates), OpenSSL (libgit2's HTTPS) and zlib are dynamic; all other TLS
# is rustls.

# --- build ---------------------------------------------------------------------------------
FROM rust:1.89-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libssl-dev cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin pallet \
 && cp target/release/pallet /pallet

# --- runtime -------------------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: registries, git and HTTP sources over TLS. libssl3, zlib1g: linked by libgit2.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /pallet /usr/local/bin/pallet
# The same non-root user deploy/deployment.yaml runs as; the cache is an emptyDir there.
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/pallet"]
CMD ["agent", "--leader-elect", "--metrics-addr=0.0.0.0:8080"]

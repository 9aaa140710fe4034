# The pallet agent image, for those who build with Docker:
#   docker build -t <registry>/pallet:<tag> .
# then `pallet install --image <registry>/pallet@sha256:<digest>`.
#
# tools/release.sh builds the same image without a Docker daemon (what the release and CI use):
# a static binary (x86_64-unknown-linux-musl, OpenSSL compiled in) on an empty base with a CA
# bundle and a non-root user; no shell.

# --- build ---------------------------------------------------------------------------------
FROM rust:1.89-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools perl make \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl --bin pallet \
 && objcopy --strip-debug target/x86_64-unknown-linux-musl/release/pallet /pallet \
 && mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp /rootfs/var/cache/pallet \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n' >/rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/rootfs/etc/group \
 && chmod 1777 /rootfs/tmp \
 && chown 65532:65532 /rootfs/var/cache/pallet

# --- runtime -------------------------------------------------------------------------------
FROM scratch
COPY --from=build /rootfs/ /
COPY --from=build /pallet /usr/local/bin/pallet
# The same non-root user deploy/agent/deployment.yaml runs as; the cache is an emptyDir there.
USER 65532:65532
ENV PATH=/usr/local/bin HOME=/tmp SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
LABEL org.opencontainers.image.title=pallet \
      org.opencontainers.image.licenses=Apache-2.0
ENTRYPOINT ["/usr/local/bin/pallet"]
CMD ["agent", "--leader-elect", "--metrics-addr=0.0.0.0:8080"]

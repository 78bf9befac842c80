# syntax=docker/dockerfile:1
# Feed's processor. Build:  docker build -f Processor.Dockerfile -t feed-processor .
# Run:    docker run feed-processor run --database-url postgres://… --handler-url http://…

FROM rust:1.95-slim-bookworm AS chef
# cmake and perl: aws-lc-sys (rustls' crypto) may build its C sources with them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake perl pkg-config \
 && rm -rf /var/lib/apt/lists/* \
 && cargo install cargo-chef --locked --version ^0.1
WORKDIR /src

# The dependency recipe changes only when Cargo.toml/Cargo.lock do.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json --bin processor
COPY . .
RUN cargo build --release --locked --bin processor

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data --create-home feed
COPY --from=builder /src/target/release/processor /usr/local/bin/processor
USER feed
WORKDIR /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s CMD ["processor", "health"]
# Inside a container the listener must face the network; the console still
# answers only IP addresses and localhost unless --allowed-host names more.
ENV FEED_LISTEN=0.0.0.0:8080
ENTRYPOINT ["processor"]
CMD ["--help"]

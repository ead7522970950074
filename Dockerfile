# Builds the operator image: docker build -t tfjob-operator .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tfjob-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/tfjob-operator /usr/local/bin/tfjob-operator
ENTRYPOINT ["/usr/local/bin/tfjob-operator"]

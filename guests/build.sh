#!/bin/sh
# Rebuilds the example guests for wasm32-wasip2 and copies the components
# into wasm/, with a checksum of each guest's sources (wasm/SOURCES.sha256)
# that the spindle-wasm tests compare against, so a source changed without
# rebuilding its .wasm fails CI.
#
#   rustup target add wasm32-wasip2 && guests/build.sh
set -eu
cd "$(dirname "$0")"
cargo build --release --target wasm32-wasip2
for g in hello echo fetch sleep burn alloc trap noreply env relay grpc print kv; do
    cp "target/wasm32-wasip2/release/$g.wasm" "wasm/$g.wasm"
done
cp target/wasm32-wasip2/release/fetch-cmd.wasm wasm/fetch-cmd.wasm
cp target/wasm32-wasip2/release/trap-cmd.wasm wasm/trap-cmd.wasm
# WASI 0.3 (wasi:http/service) guests, built with the wasip3 crate.
for g in hello echo sleep fetch burn fanout gate grpc kv; do
    cp "target/wasm32-wasip2/release/${g}_p3.wasm" "wasm/$g-p3.wasm"
done
cp target/wasm32-wasip2/release/fetch_cmd_p3.wasm wasm/fetch-cmd-p3.wasm
./sources-hash.sh > wasm/SOURCES.sha256
ls -l wasm

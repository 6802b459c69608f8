#!/bin/sh
# Rebuilds the third-party guests in wasmtime-48/: programs from wasmtime
# v48.0.0's own test suite (crates/test-programs), which `wasmtime serve`
# and `wasmtime run` pass, built for wasm32-wasip2 as they are and
# committed here, so the tests run components nobody on this project
# wrote. Needs a checkout of wasmtime at tag v48.0.0:
#
#   git clone --depth 1 --branch v48.0.0 https://github.com/bytecodealliance/wasmtime
#   rustup target add wasm32-wasip2 && guests/third-party/build.sh path/to/wasmtime
set -eu
tree=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
grep -q '^version = "48.0.0"' "$tree/Cargo.toml" || {
    echo "$tree is not wasmtime v48.0.0" >&2
    exit 1
}
bins="keyvalue_main config_get p2_cli_serve_keyvalue p2_cli_serve_config
p2_cli_serve_with_print p3_http_echo p3_http_middleware p3_http_middleware_with_chain
$(cd "$tree/crates/test-programs/src/bin" && ls p3_http_outbound_request_*.rs | sed 's/\.rs$//')"
args=""
for b in $bins; do args="$args --bin $b"; done
target=${CARGO_TARGET_DIR:-$tree/target}
(cd "$tree" && cargo build -p test-programs --target wasm32-wasip2 --release $args)
for b in $bins; do
    cp "$target/wasm32-wasip2/release/$b.wasm" "$here/wasmtime-48/$b.wasm"
done
# wasmtime's middleware tests compose the middleware with the echo (it
# uses wasm-compose; wac does the same): `cargo install wac-cli --version 0.12.0`.
m="$here/wasmtime-48"
wac plug "$m/p3_http_middleware.wasm" --plug "$m/p3_http_echo.wasm" -o "$m/composed_middleware_echo.wasm"
wac compose "$here/chain.wac" --dep "wasmtime:echo=$m/p3_http_echo.wasm" \
    --dep "wasmtime:middleware-with-chain=$m/p3_http_middleware_with_chain.wasm" \
    -o "$m/composed_middleware_with_chain_echo.wasm"
(cd "$m" && sha256sum *.wasm > SHA256SUMS)

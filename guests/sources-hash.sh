#!/bin/sh
# One line per guest: the sha256 over its sources and the shared util crate
# and workspace manifest, in a stable order.
set -eu
cd "$(dirname "$0")"
# The host's WIT a guest generates its bindings from.
wit() {
    case $1 in kv) ls ../crates/spindle-wasm/wit/keyvalue/*.wit ;; esac
}
for g in hello echo fetch sleep burn alloc trap noreply env relay grpc print kv fetch-cmd trap-cmd; do
    h=$(cat Cargo.toml util/Cargo.toml util/src/*.rs "$g/Cargo.toml" "$g"/src/*.rs $(wit "$g") | sha256sum | cut -d' ' -f1)
    echo "$h  $g"
done
for g in hello echo sleep fetch burn fanout gate grpc kv fetch-cmd; do
    h=$(cat Cargo.toml p3/util/Cargo.toml p3/util/src/*.rs "p3/$g/Cargo.toml" "p3/$g"/src/*.rs $(wit "$g") | sha256sum | cut -d' ' -f1)
    echo "$h  $g-p3"
done

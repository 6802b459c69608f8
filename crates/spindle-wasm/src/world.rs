//! Which `wasi:http` world a component serves, read from its exports
//! before anything is compiled.
//!
//! A WASI 0.2 component exports `wasi:http/incoming-handler@0.2.x` (the
//! `wasi:http/proxy` world): a synchronous export, one call per instance
//! at a time. A WASI 0.3 component exports `wasi:http/handler@0.3.x` (the
//! `wasi:http/service` world): an `async` export that one instance can run
//! many times at once. The two need different engines (WASI 0.3 needs the
//! component model's concurrency support, which makes every WASI 0.2 call
//! slower), so the choice is made from the binary's top-level export
//! section, not by compiling twice.

/// The `wasi:http` world a component exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum World {
    /// `wasi:http/proxy@0.2.x`: `incoming-handler.handle`, one instance per
    /// request unless sequential reuse is configured.
    Proxy,
    /// `wasi:http/service@0.3.x`: `handler.handle`, an `async` export; one
    /// instance serves several requests at once.
    Service,
}

impl World {
    /// The world of the component in `wasm`: [`World::Service`] if its
    /// top level exports `wasi:http/handler@0.3.*`, else [`World::Proxy`]
    /// (anything else, text format included, is left for the compiler to
    /// accept or refuse).
    ///
    /// ```
    /// use spindle_wasm::World;
    /// assert_eq!(World::of(spindle_wasm::HELLO_WASM), World::Proxy);
    /// assert_eq!(World::of(b"not wasm"), World::Proxy);
    /// ```
    pub fn of(wasm: &[u8]) -> World {
        if top_level_exports(wasm).iter().any(|n| is_p3_handler(n)) {
            World::Service
        } else {
            World::Proxy
        }
    }
}

/// What a caller wants a binary to be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// A `wasi:http` component ([`crate::Host`]).
    Http,
    /// A `wasi:cli/run` command ([`crate::run_command`]).
    Command,
}

/// Why `wasm` is not what `want` takes, said with the next step — or
/// `None` when it may be (the compiler has the last word). Checked before
/// compiling, so the common mistakes are not answered with the engine's
/// internals.
pub(crate) fn misfit(wasm: &[u8], want: Want) -> Option<String> {
    if !wasm.starts_with(b"\0asm") {
        return Some(
            "not a WebAssembly binary (it does not start with \"\\0asm\"): give a \
             component's .wasm file"
                .to_string(),
        );
    }
    if wasm.get(4..8) == Some(&[1, 0, 0, 0]) {
        return Some(
            "a core WebAssembly module, not a component: build it for wasm32-wasip2, or \
             wrap it with `wasm-tools component new`"
                .to_string(),
        );
    }
    let (mut http, mut cli) = (false, false);
    for name in top_level_exports(wasm) {
        http |= is_p3_handler(&name) || name.starts_with("wasi:http/incoming-handler@0.2");
        cli |= name.starts_with("wasi:cli/run@");
    }
    match want {
        Want::Http if !http && cli => Some(
            "a wasi:cli command (it exports wasi:cli/run), not a wasi:http component: \
             run it as a command (`spindle run`)"
                .to_string(),
        ),
        Want::Http if !http => Some(
            "exports no wasi:http handler (wasi:http/incoming-handler@0.2 or \
             wasi:http/handler@0.3)"
                .to_string(),
        ),
        Want::Command if !cli && http => Some(
            "a wasi:http component, not a command (it exports no wasi:cli/run): serve \
             it (`spindle serve`)"
                .to_string(),
        ),
        Want::Command if !cli => Some("exports no wasi:cli/run: not a command".to_string()),
        _ => None,
    }
}

/// Whether the component in `wasm` imports `wasi:keyvalue` (any of its
/// interfaces): it needs a store granted to do anything with it.
///
/// ```
/// assert!(!spindle_wasm::imports_keyvalue(spindle_wasm::HELLO_WASM));
/// ```
pub fn imports_keyvalue(wasm: &[u8]) -> bool {
    top_level_names(wasm, Side::Imports)
        .iter()
        .any(|n| n.starts_with("wasi:keyvalue/"))
}

/// The names a component exports at its top level.
fn top_level_exports(wasm: &[u8]) -> Vec<String> {
    top_level_names(wasm, Side::Exports)
}

#[derive(PartialEq)]
enum Side {
    Imports,
    Exports,
}

/// The names a component imports or exports at its top level (nested
/// modules and components skipped); what cannot be parsed ends the list.
fn top_level_names(wasm: &[u8], side: Side) -> Vec<String> {
    use wasmparser::{Parser, Payload};
    let mut names = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { break };
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => break,
            },
            Payload::ComponentImportSection(imports) if depth == 0 && side == Side::Imports => {
                names.extend(
                    imports
                        .into_iter()
                        .flatten()
                        .map(|i| i.name.name.to_string()),
                );
            }
            Payload::ComponentExportSection(exports) if depth == 0 && side == Side::Exports => {
                names.extend(
                    exports
                        .into_iter()
                        .flatten()
                        .map(|e| e.name.name.to_string()),
                );
            }
            _ => {}
        }
    }
    names
}

fn is_p3_handler(name: &str) -> bool {
    is_p3(name, "wasi:http/handler@0.3")
}

/// Whether `wasm` is a WASI 0.3 command: it exports `wasi:cli/run@0.3.*`.
pub(crate) fn is_p3_command(wasm: &[u8]) -> bool {
    top_level_exports(wasm)
        .iter()
        .any(|n| is_p3(n, "wasi:cli/run@0.3"))
}

/// Whether `name` is `prefix` (an interface at version 0.3) at 0.3.x or a
/// 0.3 release candidate, not at 0.30.
fn is_p3(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_mistakes_are_named_with_the_next_step() {
        let text = misfit(b"hello, world\n", Want::Http).unwrap();
        assert!(text.starts_with("not a WebAssembly binary"), "{text}");
        let core = misfit(b"\0asm\x01\0\0\0", Want::Http).unwrap();
        assert!(core.contains("core WebAssembly module"), "{core}");
        assert_eq!(misfit(crate::HELLO_WASM, Want::Http), None);
        let http = misfit(crate::HELLO_WASM, Want::Command).unwrap();
        assert!(http.contains("serve it"), "{http}");
    }

    #[test]
    fn export_names() {
        assert!(is_p3_handler("wasi:http/handler@0.3.0"));
        assert!(is_p3_handler("wasi:http/handler@0.3.1"));
        assert!(is_p3_handler("wasi:http/handler@0.3.0-rc-2025-09-16"));
        assert!(!is_p3_handler("wasi:http/handler@0.30.0"));
        assert!(!is_p3_handler("wasi:http/incoming-handler@0.2.6"));
        assert!(!is_p3_handler("my:http/handler@0.3.0"));
    }
}

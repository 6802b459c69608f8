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
        use wasmparser::{Parser, Payload};
        // Nested modules and components come inline between their section
        // and their own `End`; only depth 0 is the component's interface.
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(wasm) {
            let Ok(payload) = payload else {
                return World::Proxy;
            };
            match payload {
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) => match depth.checked_sub(1) {
                    Some(d) => depth = d,
                    None => break,
                },
                Payload::ComponentExportSection(exports) if depth == 0 => {
                    for export in exports.into_iter().flatten() {
                        if is_p3_handler(export.name.name) {
                            return World::Service;
                        }
                    }
                }
                _ => {}
            }
        }
        World::Proxy
    }
}

fn is_p3_handler(name: &str) -> bool {
    name.strip_prefix("wasi:http/handler@0.3")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

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

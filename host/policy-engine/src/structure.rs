//! Limits on a module's shape, checked before it is compiled.
//!
//! Compiling runs Cranelift in the operator's process and cannot be interrupted, and its cost
//! grows faster than linearly with the size of a single function and its number of locals
//! (register allocation). A policy module is refused, naming the limit, before compilation when
//! one function's body or locals, or the number of functions, exceeds what any reasonable
//! policy needs; the total size is already capped ([`crate::SandboxLimits::max_module`]). With
//! these bounds a module compiles in seconds at most, and the loader's own time bound
//! (`tfjob_policy_sync::watch::LOAD_BOUND`) covers the rest.
//!
//! Rust guests of this project stay far below: the largest function of the default policies is
//! a few KiB, with tens of locals.

use wasmparser::{Parser, Payload};

/// Largest body of one function, in bytes.
pub const MAX_FUNCTION_BYTES: usize = 256 << 10;
/// Most locals of one function.
pub const MAX_LOCALS: u64 = 10_000;
/// Most functions with a body, over all core modules of the component.
pub const MAX_FUNCTIONS: u64 = 50_000;

/// Checks the shape of `wasm` (a component or a core module, binary). Bytes that do not parse
/// are refused here, so nothing the check could not read reaches the compiler.
pub fn check(wasm: &[u8]) -> Result<(), String> {
    let mut functions: u64 = 0;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| format!("not a Wasm component: {e}"))?;
        let Payload::CodeSectionEntry(body) = payload else {
            continue;
        };
        functions += 1;
        if functions > MAX_FUNCTIONS {
            return Err(format!(
                "the module has more than {MAX_FUNCTIONS} functions; refused before compiling"
            ));
        }
        let size = body.range().len();
        if size > MAX_FUNCTION_BYTES {
            return Err(format!(
                "function {} has a body of {size} bytes, more than {MAX_FUNCTION_BYTES}; refused \
                 before compiling",
                functions - 1
            ));
        }
        let locals = body
            .get_locals_reader()
            .map_err(|e| format!("not a Wasm component: {e}"))?;
        let mut count: u64 = 0;
        for group in locals {
            let (n, _) = group.map_err(|e| format!("not a Wasm component: {e}"))?;
            count += u64::from(n);
            if count > MAX_LOCALS {
                return Err(format!(
                    "function {} declares more than {MAX_LOCALS} locals; refused before compiling",
                    functions - 1
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module whose one function declares `locals` locals and has a body of about
    /// `body` bytes (`nop`s).
    fn module(locals: u32, body: usize) -> Vec<u8> {
        let wat = format!(
            "(module (func (local {}) {}))",
            "i32 ".repeat(locals as usize),
            "nop ".repeat(body)
        );
        wat::parse_str(wat).unwrap()
    }

    #[test]
    fn ordinary_modules_pass() {
        assert_eq!(check(&module(10, 100)), Ok(()));
        assert!(check(b"\0asm\x0d\0\x01\0 truncated").is_err(), "refused");
    }

    #[test]
    fn oversized_functions_and_locals_are_refused() {
        let err = check(&module(MAX_LOCALS as u32 + 1, 1)).unwrap_err();
        assert!(err.contains("locals"), "{err}");
        let err = check(&module(0, MAX_FUNCTION_BYTES + 1)).unwrap_err();
        assert!(err.contains("body"), "{err}");
    }
}

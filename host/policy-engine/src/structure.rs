//! Limits on a module's shape, checked before it is compiled.
//!
//! Compiling runs Cranelift (in the operator's process, or a child of it) and cannot be
//! interrupted, and its cost
//! grows faster than linearly with the size of a single function and its number of locals
//! (register allocation). A policy module is refused, naming the limit, before compilation when
//! one function's body or locals, the number of functions, or the module's block cost (below)
//! exceeds what any reasonable policy needs; the total size is already capped
//! ([`crate::SandboxLimits::max_module`]). With these bounds a module compiles in seconds at
//! most, and the loader's own time bound (`tfjob_policy_sync::watch::LOAD_BOUND`) covers the
//! rest.
//!
//! The bounds are set from the largest real guests, with headroom. Rust policies of this
//! project stay far below them (a few KiB per function, tens of locals); a language runtime is
//! much larger. A Python policy (componentize-py 0.25, CPython inside) has a 417 KiB function
//! (the interpreter loop), at most 271 locals and 3,112 blocks in one function, and a sum of
//! squared block counts of 2.1e7; a JavaScript one (componentize-js 0.23, SpiderMonkey) a
//! 168 KiB function, 118 locals, 5,352 blocks and 1.0e8.
//!
//! **Block cost.** Cranelift's time grows with the square of a function's blocks (`block`,
//! `loop`, `if`, `else`, `try_table`), whatever their nesting, and with blocks times locals
//! (values carried from block to block): measured on this project's 2-core machine, a function
//! of 33,000 empty blocks (100 KB) took 2.2 s to compile, one of 350,000 (1 MiB) 217 s, and one
//! of 22,000 blocks each touching some of 10,000 locals 6.3 s. The size bound alone cannot stop
//! that, so a module's block cost, the sum over its functions of blocks x (blocks + locals), is
//! bounded by [`MAX_BLOCK_COST`] and locals by [`MAX_LOCALS`]. At those bounds the crafted
//! worst cases measured compile in 0.9 s (empty blocks), 2.4 s (blocks and 2,000 locals in one
//! function) and 1.7 s (the same spread over 20 functions); the real components above cost a
//! fifth of the bound at most.

use wasmparser::{Parser, Payload};

/// Largest body of one function, in bytes.
pub const MAX_FUNCTION_BYTES: usize = 1 << 20;
/// Largest block cost: the sum over a module's functions of blocks x (blocks + locals).
pub const MAX_BLOCK_COST: u64 = 500_000_000;
/// Most locals of one function.
pub const MAX_LOCALS: u64 = 2_000;
/// Most functions with a body, over all core modules of the component.
pub const MAX_FUNCTIONS: u64 = 50_000;

/// Checks the shape of `wasm` (a component or a core module, binary). Bytes that do not parse
/// are refused here, so nothing the check could not read reaches the compiler.
pub fn check(wasm: &[u8]) -> Result<(), String> {
    let mut functions: u64 = 0;
    let mut block_cost: u64 = 0;
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
        let blocks = blocks(&body)?;
        block_cost = block_cost.saturating_add(blocks.saturating_mul(blocks + count));
        if block_cost > MAX_BLOCK_COST {
            return Err(format!(
                "the module's functions hold too many blocks to compile in bounded time (function \
                 {} brings the block cost, the sum of blocks x (blocks + locals) over functions, \
                 above {MAX_BLOCK_COST}); refused before compiling",
                functions - 1
            ));
        }
    }
    Ok(())
}

/// The blocks of a function body (`block`, `loop`, `if`, `else`, `try_table`).
fn blocks(body: &wasmparser::FunctionBody<'_>) -> Result<u64, String> {
    use wasmparser::Operator;

    let not_wasm = |e: wasmparser::BinaryReaderError| format!("not a Wasm component: {e}");
    let mut ops = body.get_operators_reader().map_err(not_wasm)?;
    let mut count: u64 = 0;
    while !ops.eof() {
        if let Operator::Block { .. }
        | Operator::Loop { .. }
        | Operator::If { .. }
        | Operator::Else
        | Operator::TryTable { .. } = ops.read().map_err(not_wasm)?
        {
            count += 1;
        }
    }
    Ok(count)
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

    /// A core module of `functions` functions, each of `blocks` empty blocks, nested.
    fn blocks(functions: usize, blocks: usize) -> Vec<u8> {
        let body = format!(
            "(func {}{})",
            "block ".repeat(blocks),
            "end ".repeat(blocks)
        );
        wat::parse_str(format!("(module {})", body.repeat(functions))).unwrap()
    }

    #[test]
    fn modules_crafted_to_compile_slowly_are_refused() {
        let root = (MAX_BLOCK_COST as f64).sqrt() as usize;
        // Locals count with the blocks: root blocks fit alone, not with 100 locals.
        let with_locals = format!(
            "(module (func (local {}) {}{}))",
            "i32 ".repeat(100),
            "block ".repeat(root),
            "end ".repeat(root)
        );
        assert!(check(&wat::parse_str(with_locals).unwrap()).is_err());
        assert_eq!(check(&blocks(1, root)), Ok(()));
        let err = check(&blocks(1, root + 1)).unwrap_err();
        assert!(err.contains("function 0 brings the block cost"), "{err}");
        // Spread over functions, the blocks add up all the same.
        let err = check(&blocks(4, root / 2 + 1)).unwrap_err();
        assert!(err.contains("function 3 brings the block cost"), "{err}");
        // Blocks one after another count as much as nested ones.
        let wide = format!("(module (func {}))", "block end ".repeat(root + 1));
        assert!(check(&wat::parse_str(wide).unwrap()).is_err());
        // An `if` with its `else` is two blocks.
        let branches = format!(
            "(module (func {}))",
            "i32.const 0 if else end ".repeat(root / 2 + 1)
        );
        assert!(check(&wat::parse_str(branches).unwrap()).is_err());
    }
}

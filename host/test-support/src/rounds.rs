//! How many rounds a test that repeats a fault or a swap runs: its full count when asked for
//! (`TFJOB_TEST_ROUNDS=full`, which `tests/run --full` sets, and the default of a plain
//! `cargo test`), fewer in the everyday run (`TFJOB_TEST_ROUNDS=quick`, which `tests/run` and
//! so CI set). The quick count still crosses every path the loop is there for; the full count
//! is for hunting what only a long storm shows.

/// The variable that chooses the counts.
pub const VARIABLE: &str = "TFJOB_TEST_ROUNDS";

/// Which counts the loops run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    Quick,
    Full,
}

impl Depth {
    /// The depth `value` of [`VARIABLE`] names; unset is full. Any other value is refused,
    /// naming the variable, so a misspelt setting never passes for either.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("full") => Ok(Depth::Full),
            Some("quick") => Ok(Depth::Quick),
            Some(other) => Err(format!(
                "{VARIABLE}={other:?}: expected \"quick\" or \"full\""
            )),
        }
    }

    /// The depth this process runs at.
    pub fn current() -> Self {
        let value = std::env::var(VARIABLE).ok();
        Depth::parse(value.as_deref()).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// `full` rounds, or `quick` ones in the everyday run.
pub fn rounds(full: usize, quick: usize) -> usize {
    match Depth::current() {
        Depth::Full => full,
        Depth::Quick => quick.min(full),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_and_full_are_full_quick_is_quick_and_anything_else_is_refused() {
        assert_eq!(Depth::parse(None), Ok(Depth::Full));
        assert_eq!(Depth::parse(Some("full")), Ok(Depth::Full));
        assert_eq!(Depth::parse(Some("quick")), Ok(Depth::Quick));
        for bad in ["", "Quick", "fast", "quick ", "ｑｕｉｃｋ"] {
            let e = Depth::parse(Some(bad)).unwrap_err();
            assert!(e.starts_with("TFJOB_TEST_ROUNDS="), "{e}");
        }
    }
}

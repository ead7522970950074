//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2`, `1e3`): parsing, exact comparison and
//! the API server's canonical spelling.
//!
//! A quantity is held as an exact integer number of nano-units (`i128`), which is what the API
//! server itself keeps (`resource.Quantity` rounds anything finer than `1n` up, away from zero,
//! so a tiny request never becomes zero). Comparisons are therefore exact: no floating point,
//! `1Gi == 1024Mi`, `0.1 == 100m`. The quantity also remembers the family its input was written
//! in, because the canonical output depends on it:
//!
//! - binary (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`): the largest binary suffix that leaves an
//!   integer (`1024Mi` -> `1Gi`, `1.5Gi` -> `1536Mi`); a value below 1024 or with a fraction
//!   is spelled in the decimal family instead, as the API server does (`0.5Ki` -> `512`);
//! - decimal (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`): the largest suffix that leaves
//!   an integer (`1000m` -> `1`, `0.5` -> `500m`, `1500k` -> `1500k`);
//! - exponent (`1e3`, `2E-3`): the largest multiple-of-three exponent that leaves an integer
//!   (`1e3` -> `1e3`, `1.5e3` -> `1500`).
//!
//! Zero is always `0`.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// Nano-units per unit: the finest precision the API server keeps.
const NANOS_PER_UNIT: u128 = 1_000_000_000;
/// `10^0 .. 10^38` fit in a `u128`; larger powers never change a rounded-up result.
const MAX_POW10: u32 = 38;
/// Exponents beyond this are out of any representable range; rejecting them early keeps the
/// arithmetic below overflow-free.
const MAX_EXPONENT_DIGITS: usize = 6;

/// Binary suffixes, indexed by power of 1024.
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The family a quantity was written in; it decides the canonical spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Powers of 1024: `Ki`, `Mi`, `Gi`, ...
    BinarySi,
    /// Powers of 1000: `m`, `k`, `M`, `G`, ... or no suffix.
    DecimalSi,
    /// A decimal exponent: `1e3`, `5E-1`.
    DecimalExponent,
}

/// An exact resource quantity. Equality, ordering and hashing compare values only (`1Gi` equals
/// `1024Mi`); the [`Format`] only affects [`Quantity::canonical`].
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// A string that is not a Kubernetes quantity; the message quotes the string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantityError {
    input: String,
    problem: &'static str,
}

impl QuantityError {
    /// The string that failed to parse.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quantity {:?}: {}", self.input, self.problem)
    }
}

impl std::error::Error for QuantityError {}

impl Quantity {
    /// Zero, in the decimal family.
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSi,
    };

    /// Parses a quantity as the API server does: `[+-]digits[.digits]suffix`, where the suffix
    /// is a binary or decimal SI suffix or `e`/`E` and a signed integer exponent.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let fail = |problem| QuantityError {
            input: input.to_owned(),
            problem,
        };
        let (negative, rest) = match input.as_bytes().first() {
            None => return Err(fail("empty string")),
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            Some(_) => (false, input),
        };
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_digits = &rest[..int_len];
        let mut rest = &rest[int_len..];
        let mut frac_digits = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(fail("expected a number"));
        }
        let (format, decimal_exponent, binary_exponent) =
            parse_suffix(rest).ok_or_else(|| fail("unknown suffix"))?;

        // Trailing fraction zeros carry no value; dropping them keeps long inputs like
        // `1.000000000000000000000000000000000000000` from overflowing the coefficient.
        let frac_digits = frac_digits.trim_end_matches('0');
        let digits = int_digits.bytes().chain(frac_digits.bytes());
        // value in nano-units = coefficient * 2^binary * 10^(exponent + 9 - fraction digits)
        let power = decimal_exponent + 9 - frac_digits.len() as i64;
        let sign = |magnitude: i128| if negative { -magnitude } else { magnitude };
        if int_digits.len() + frac_digits.len() <= 19 {
            // Up to 19 digits cannot overflow 64 bits, which are native in Wasm (see
            // `canonical`); so is the rest of the arithmetic for every value below 18 G units
            // (every cpu and most memory quantities). Larger values take the 128-bit path.
            let coefficient = digits
                .clone()
                .fold(0u64, |c, d| c * 10 + u64::from(d - b'0'));
            if let Some(magnitude) = nanos_u64(coefficient, binary_exponent, power) {
                return Ok(Quantity {
                    nanos: sign(i128::from(magnitude)),
                    format,
                });
            }
        }
        let mut coefficient: u128 = 0;
        for digit in digits {
            coefficient = coefficient
                .checked_mul(10)
                .and_then(|c| c.checked_add(u128::from(digit - b'0')))
                .ok_or_else(|| fail("too many significant digits"))?;
        }
        let magnitude = nanos_u128(coefficient, binary_exponent, power).map_err(fail)?;
        let magnitude = i128::try_from(magnitude).map_err(|_| fail("out of range"))?;
        Ok(Quantity {
            nanos: sign(magnitude),
            format,
        })
    }

    /// A whole number of units in the given family (`Quantity::from_units(2, Format::BinarySi)`
    /// is two bytes, spelled `2`).
    pub fn from_units(units: i64, format: Format) -> Quantity {
        Quantity {
            nanos: i128::from(units) * NANOS_PER_UNIT as i128,
            format,
        }
    }

    /// The exact value in nano-units (`1m` is `1_000_000`).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The family the quantity was written in.
    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The API server's canonical spelling (see the module documentation).
    pub fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".to_owned();
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let magnitude = self.nanos.unsigned_abs();
        // Wasm has no 128-bit arithmetic: every operation on an `i128` is a call into the
        // compiler's runtime library, and a quantity is spelled for every handled resource of
        // every container. Whole values (all requirements in practice) are spelled from their
        // number of units, which fits in 64 bits for any quantity below 18 E.
        match u64::try_from(magnitude) {
            Ok(nanos) if nanos.is_multiple_of(NANOS_PER_UNIT as u64) => {
                spell(sign, nanos / NANOS_PER_UNIT as u64, 0, self.format)
            }
            Ok(nanos) => spell(sign, nanos, -9, self.format),
            Err(_) if magnitude.is_multiple_of(NANOS_PER_UNIT) => {
                let units = magnitude / NANOS_PER_UNIT;
                match u64::try_from(units) {
                    Ok(units) => spell(sign, units, 0, self.format),
                    Err(_) => spell(sign, units, 0, self.format),
                }
            }
            Err(_) => spell(sign, magnitude, -9, self.format),
        }
    }

    /// The exact sum, spelled in this quantity's family, or in `other`'s when this one is zero
    /// (as the API server's `Quantity.Add` does); `None` on overflow.
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        Some(Quantity {
            nanos: self.nanos.checked_add(other.nanos)?,
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        })
    }

    /// The exact difference, spelled in this quantity's family (in `other`'s when this one is
    /// zero); `None` on overflow.
    pub fn checked_sub(self, other: Quantity) -> Option<Quantity> {
        Some(Quantity {
            nanos: self.nanos.checked_sub(other.nanos)?,
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        })
    }

    /// Parses a k8s-openapi quantity.
    pub fn from_k8s(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Quantity, QuantityError> {
        Quantity::parse(&q.0)
    }

    /// The canonical spelling as a k8s-openapi quantity.
    pub fn to_k8s(&self) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(self.canonical())
    }
}

/// Rewrites a quantity string in its canonical spelling (`"1024Mi"` -> `"1Gi"`).
pub fn canonicalize(input: &str) -> Result<String, QuantityError> {
    Quantity::parse(input).map(|q| q.canonical())
}

/// The smaller of two quantities, compared exactly; `a` when they are equal (so its spelling
/// family is kept). Same as [`Ord::min`], spelled out for readers of policy code.
pub fn min(a: Quantity, b: Quantity) -> Quantity {
    Ord::min(a, b)
}

/// The canonical spelling of `mantissa * 10^exponent` units (`exponent` is 0 or -9), written in
/// `format`'s family; `u64` or `u128` (see [`Quantity::canonical`]).
fn spell<N>(sign: &str, mut mantissa: N, mut exponent: i32, format: Format) -> String
where
    N: Copy + PartialEq + PartialOrd + itoa::Integer + From<u32>,
    N: std::ops::Rem<Output = N> + std::ops::Div<Output = N>,
{
    let zero = N::from(0);
    let thousand = N::from(1000);
    let kibi = N::from(1024);
    if format == Format::BinarySi && exponent == 0 && mantissa >= kibi {
        // A whole number of units: the largest binary suffix that leaves an integer.
        let mut power = 0;
        while power + 1 < BINARY_SUFFIXES.len() && mantissa % kibi == zero {
            mantissa = mantissa / kibi;
            power += 1;
        }
        return spelled(sign, mantissa, BINARY_SUFFIXES[power], None);
    }
    // Decimal: raise the exponent in steps of three while the mantissa stays an integer. SI
    // suffixes stop at `E` (10^18); exponents do not.
    let max_exponent = match format {
        Format::DecimalExponent => i32::MAX,
        Format::BinarySi | Format::DecimalSi => 18,
    };
    while exponent < max_exponent && mantissa % thousand == zero {
        mantissa = mantissa / thousand;
        exponent += 3;
    }
    match format {
        Format::DecimalExponent if exponent != 0 => spelled(sign, mantissa, "e", Some(exponent)),
        Format::DecimalExponent => spelled(sign, mantissa, "", None),
        Format::BinarySi | Format::DecimalSi => {
            spelled(sign, mantissa, decimal_suffix(exponent), None)
        }
    }
}

/// `sign mantissa suffix [exponent]` in one allocation, without the formatting machinery (a
/// quantity is spelled for every handled resource of every container).
fn spelled(
    sign: &str,
    mantissa: impl itoa::Integer,
    suffix: &str,
    exponent: Option<i32>,
) -> String {
    let mut digits = itoa::Buffer::new();
    let mut exponent_digits = itoa::Buffer::new();
    let mantissa = digits.format(mantissa);
    let exponent = exponent.map_or("", |e| exponent_digits.format(e));
    let mut out =
        String::with_capacity(sign.len() + mantissa.len() + suffix.len() + exponent.len());
    for part in [sign, mantissa, suffix, exponent] {
        out.push_str(part);
    }
    out
}

/// `coefficient * 2^binary_exponent * 10^power` nano-units, rounded up (away from zero) when
/// `power` is negative: the value [`Quantity::parse`] keeps, or what is wrong with it.
fn nanos_u128(coefficient: u128, binary_exponent: u32, power: i64) -> Result<u128, &'static str> {
    let coefficient = coefficient
        .checked_mul(1u128 << binary_exponent)
        .ok_or("out of range")?;
    if coefficient == 0 {
        Ok(0)
    } else if power >= 0 {
        let factor = u32::try_from(power)
            .ok()
            .filter(|p| *p <= MAX_POW10)
            .map(|p| 10u128.pow(p))
            .ok_or("out of range")?;
        coefficient.checked_mul(factor).ok_or("out of range")
    } else {
        // Finer than a nano-unit: round up, away from zero, as the API server does.
        match u32::try_from(-power).ok().filter(|p| *p <= MAX_POW10) {
            Some(p) => {
                let divisor = 10u128.pow(p);
                Ok(coefficient / divisor + u128::from(!coefficient.is_multiple_of(divisor)))
            }
            // The divisor exceeds any coefficient: the value is below one nano-unit.
            None => Ok(1),
        }
    }
}

/// [`nanos_u128`] in 64-bit arithmetic, native in Wasm; `None` when the value does not fit
/// (the 128-bit path then decides).
fn nanos_u64(coefficient: u64, binary_exponent: u32, power: i64) -> Option<u64> {
    let scaled = coefficient.checked_mul(1u64.checked_shl(binary_exponent)?)?;
    if scaled == 0 {
        return Some(0);
    }
    if power >= 0 {
        scaled.checked_mul(10u64.checked_pow(u32::try_from(power).ok()?)?)
    } else {
        let divisor = 10u64.checked_pow(u32::try_from(-power).ok()?)?;
        Some(scaled / divisor + u64::from(!scaled.is_multiple_of(divisor)))
    }
}

/// Resolves a suffix to its family, decimal exponent and binary exponent.
fn parse_suffix(suffix: &str) -> Option<(Format, i64, u32)> {
    let decimal = |exponent| Some((Format::DecimalSi, exponent, 0));
    let binary = |exponent| Some((Format::BinarySi, 0, exponent));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            // `E` alone is exa (matched above); `e`/`E` followed by an integer is an exponent.
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty()
                || digits.len() > MAX_EXPONENT_DIGITS
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            Some((Format::DecimalExponent, exponent.parse().ok()?, 0))
        }
    }
}

fn decimal_suffix(exponent: i32) -> &'static str {
    match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => "",
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_64_bit_path_agrees_with_the_128_bit_path_wherever_it_answers() {
        let coefficients = [
            0,
            1,
            7,
            999,
            1000,
            1024,
            123_456_789,
            u64::from(u32::MAX),
            9_999_999_999_999_999_999,
            u64::MAX / 3,
            u64::MAX,
        ];
        let mut answered = 0;
        for coefficient in coefficients {
            for binary_exponent in [0, 10, 20, 30, 40, 50, 60] {
                for power in -45..=45 {
                    let wide = nanos_u128(u128::from(coefficient), binary_exponent, power);
                    if let Some(narrow) = nanos_u64(coefficient, binary_exponent, power) {
                        answered += 1;
                        assert_eq!(
                            Ok(u128::from(narrow)),
                            wide,
                            "{coefficient} * 2^{binary_exponent} * 10^{power}"
                        );
                    } else {
                        // Declined only where the value, the scaled coefficient or the power of
                        // ten does not fit in 64 bits.
                        let scaled = u128::from(coefficient) << binary_exponent;
                        assert!(
                            wide.is_err()
                                || wide.is_ok_and(|w| w > u128::from(u64::MAX))
                                || scaled > u128::from(u64::MAX)
                                || power.abs() > 19,
                            "{coefficient} * 2^{binary_exponent} * 10^{power}"
                        );
                    }
                }
            }
        }
        assert!(answered > 1000, "{answered}");
    }

    #[test]
    fn parses_every_family_exactly() {
        assert_eq!(q("500m").nanos(), 500_000_000);
        assert_eq!(q("2").nanos(), 2_000_000_000);
        assert_eq!(q("1.5Gi").nanos(), 1_610_612_736 * 1_000_000_000);
        assert_eq!(q("100Ki").nanos(), 102_400 * 1_000_000_000);
        assert_eq!(q("1M").nanos(), 1_000_000 * 1_000_000_000);
        assert_eq!(q("1e3").nanos(), 1_000 * 1_000_000_000);
        assert_eq!(q("1E3").nanos(), 1_000 * 1_000_000_000);
        assert_eq!(q("2e-3").nanos(), 2_000_000);
        assert_eq!(q("1E").nanos(), 1_000_000_000_000_000_000 * 1_000_000_000);
        assert_eq!(q("+.5").nanos(), 500_000_000);
        assert_eq!(q("5.").nanos(), 5_000_000_000);
        assert_eq!(q("-1.5").nanos(), -1_500_000_000);
        assert_eq!(q("7n").nanos(), 7);
        assert_eq!(q("3u").nanos(), 3_000);
        assert_eq!(
            q("0001.000000000000000000000000000000000000000000").nanos(),
            1_000_000_000
        );
        assert_eq!(q("1.5Gi").format(), Format::BinarySi);
        assert_eq!(q("1e3").format(), Format::DecimalExponent);
        assert_eq!(q("1k").format(), Format::DecimalSi);
    }

    #[test]
    fn precision_finer_than_nano_rounds_up_away_from_zero() {
        assert_eq!(q("0.1n").nanos(), 1);
        assert_eq!(q("1.0000000001").nanos(), 1_000_000_001);
        assert_eq!(q("-0.1n").nanos(), -1);
        assert_eq!(q("1e-40").nanos(), 1);
        assert!(q("0e-40").is_zero());
    }

    #[test]
    fn rejects_malformed_strings_naming_them() {
        for bad in [
            "",
            "abc",
            "1.5.5",
            "Gi",
            "1 Gi",
            "1gi",
            "1KiB",
            "--1",
            ".",
            "1e",
            "1e+",
            "1e1.5",
            "1e1234567",
            "0x10",
            "1Mi ",
            " 1",
        ] {
            let err = Quantity::parse(bad).expect_err(bad);
            assert_eq!(err.input(), bad);
            assert!(
                err.to_string()
                    .starts_with(&format!("invalid quantity {bad:?}: "))
            );
        }
        let err = Quantity::parse("1e30Ei").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid quantity \"1e30Ei\": unknown suffix"
        );
        assert!(
            Quantity::parse("1e100")
                .unwrap_err()
                .to_string()
                .ends_with("out of range")
        );
        assert!(
            Quantity::parse(&"9".repeat(40))
                .unwrap_err()
                .to_string()
                .ends_with("too many significant digits")
        );
    }

    #[test]
    fn comparisons_are_exact_across_families() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("0.1"), q("100m"));
        assert_eq!(q("1e3"), q("1k"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("999m") < q("1"));
        assert!(q("1000000001n") > q("1"));
        assert!(q("-1") < q("0"));
        assert_eq!(min(q("2"), q("1500m")), q("1500m"));
        // Equal values keep the first argument's spelling.
        assert_eq!(min(q("1Gi"), q("1024Mi")).canonical(), "1Gi");
        assert_eq!(min(q("1024Mi"), q("1Gi")).format(), Format::BinarySi);
    }

    #[test]
    fn canonical_spellings_match_the_api_server() {
        for (input, canonical) in [
            ("1024Mi", "1Gi"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("1.5Gi", "1536Mi"),
            ("1.5", "1500m"),
            ("2", "2"),
            ("100Ki", "100Ki"),
            ("1M", "1M"),
            ("1000k", "1M"),
            ("1500k", "1500k"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("5e-1", "500e-3"),
            ("1e21", "1e21"),
            ("0.5Ki", "512"),
            ("1023", "1023"),
            ("1536", "1536"),
            ("1.5Ki", "1536"),
            ("1Ki", "1Ki"),
            ("0.1n", "1n"),
            ("0", "0"),
            ("0Gi", "0"),
            ("-0", "0"),
            ("-500m", "-500m"),
            ("-1Gi", "-1Gi"),
            ("1024Ei", "1024Ei"),
            ("1000E", "1000E"),
            ("0.0001Ki", "102400u"),
        ] {
            assert_eq!(q(input).canonical(), canonical, "{input}");
            assert_eq!(canonicalize(input).unwrap(), canonical, "{input}");
            // Canonical spellings are fixed points.
            assert_eq!(q(canonical).canonical(), canonical, "{canonical}");
        }
    }

    #[test]
    fn k8s_openapi_conversions() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
        let parsed = Quantity::from_k8s(&K8sQuantity("2048Ki".into())).unwrap();
        assert_eq!(parsed.to_k8s(), K8sQuantity("2Mi".into()));
        assert_eq!(Quantity::from_units(3, Format::DecimalSi).canonical(), "3");
        assert_eq!(
            Quantity::from_units(2048, Format::BinarySi).canonical(),
            "2Ki"
        );
        assert_eq!(Quantity::ZERO.canonical(), "0");
        assert!(q("-1").is_negative());
    }

    #[test]
    fn sums_keep_the_first_nonzero_family() {
        let sum = |a: &str, b: &str| q(a).checked_add(q(b)).unwrap().canonical();
        assert_eq!(sum("1Gi", "512Mi"), "1536Mi");
        assert_eq!(sum("500m", "1500m"), "2");
        assert_eq!(sum("0", "1Gi"), "1Gi");
        assert_eq!(sum("1", "1Ki"), "1025");
        // 10^29 units is 10^38 nano-units, just inside an i128; twice that is not.
        assert_eq!(q("1e29").checked_add(q("1e29")), None);
    }

    #[test]
    fn differences_keep_the_first_nonzero_family() {
        let difference = |a: &str, b: &str| q(a).checked_sub(q(b)).unwrap().canonical();
        assert_eq!(difference("2Gi", "512Mi"), "1536Mi");
        assert_eq!(difference("1", "1500m"), "-500m");
        assert_eq!(difference("0", "1Gi"), "-1Gi");
        assert_eq!(q("-1e29").checked_sub(q("1e29")), None);
    }
}

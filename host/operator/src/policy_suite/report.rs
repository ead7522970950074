//! Reporting a suite's results: a table, JSON or JUnit XML, with text from the suite or the policy made printable.

use std::time::Duration;

use serde_json::{Value, json};

use super::{compare::*, run::*};

/// `text` with control characters and invisible reordering characters escaped, for a terminal.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || invisible {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// The table: one line per case, then each failure with its differences, then the counts.
pub fn table(report: &Report) -> String {
    let rows: Vec<[String; 4]> = report
        .cases
        .iter()
        .map(|c| {
            [
                if c.passed() { "ok" } else { "FAILED" }.to_owned(),
                c.hook.to_string(),
                millis(c.elapsed),
                printable(&c.name),
            ]
        })
        .collect();
    let header = ["RESULT", "HOOK", "TIME", "CASE"].map(str::to_owned);
    let mut widths = [0usize; 4];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let reads = std::iter::once(&[][..]).chain(report.cases.iter().map(|c| c.reads.as_slice()));
    for (r, read) in std::iter::once(&header).chain(&rows).zip(reads) {
        let line = format!(
            "{:<w0$}   {:<w1$}   {:>w2$}   {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
        for record in read {
            out.push_str(&format!("      read {}\n", printable(&read_text(record))));
        }
    }
    for c in report.cases.iter().filter(|c| !c.passed()) {
        out.push_str(&format!(
            "\nFAILED {} ({}, {})\nexpected (-), actual (+):\n",
            printable(&c.name),
            c.hook,
            c.policy
        ));
        for line in diff_text(&c.mismatches).lines() {
            out.push_str(&format!("  {}\n", printable(line)));
        }
    }
    let mut policies: Vec<&str> = report.cases.iter().map(|c| c.policy.as_str()).collect();
    policies.sort_unstable();
    policies.dedup();
    out.push_str(&format!(
        "\n{}: {} cases of {} in {}\n{} passed, {} failed\n",
        printable(&report.suite),
        report.cases.len(),
        policies.join(", "),
        millis(report.elapsed()),
        report.passed(),
        report.failed()
    ));
    out
}

/// One read as the table shows it: `nodes ?pool=gpu: 3 objects at 41`.
fn read_text(r: &tfjob_policy_engine::cluster_access::ReadRecord) -> String {
    let place = if r.namespace.is_empty() {
        String::new()
    } else {
        format!(" in {}", r.namespace)
    };
    format!(
        "{}{place} {}: {} object{} at resourceVersion {}",
        r.resource,
        r.what,
        r.objects,
        if r.objects == 1 { "" } else { "s" },
        r.resource_version
    )
}

pub(crate) fn mismatch_json(m: &Mismatch) -> Value {
    match m {
        Mismatch::Value {
            path,
            expected,
            actual,
        } => {
            let mut v = json!({"path": path.to_string()});
            if let Some(e) = expected {
                v["expected"] = e.clone();
            }
            if let Some(a) = actual {
                v["actual"] = a.clone();
            }
            v
        }
        Mismatch::Outcome { expected, actual } => {
            json!({"path": "(outcome)", "expected": expected, "actual": actual})
        }
    }
}

/// The report as one JSON document; failed cases carry what came out and the differences.
pub fn to_json(report: &Report) -> Value {
    let cases: Vec<Value> = report
        .cases
        .iter()
        .map(|c| {
            let mut v = json!({
                "name": c.name,
                "hook": c.hook,
                "policy": c.policy,
                "passed": c.passed(),
                "seconds": c.elapsed.as_secs_f64(),
            });
            if !c.reads.is_empty() {
                v["reads"] = json!(c.reads);
            }
            if !c.passed() {
                v["actual"] = match &c.outcome {
                    Ok(result) => json!({"result": result}),
                    Err(f) => {
                        json!({"failure": {"category": f.category.as_str(), "message": f.message}})
                    }
                };
                v["differences"] = c.mismatches.iter().map(mismatch_json).collect();
            }
            v
        })
        .collect();
    json!({
        "suite": report.suite,
        "passed": report.passed(),
        "failed": report.failed(),
        "cases": cases,
    })
}

/// `text` for XML: the five special characters as entities, characters XML 1.0 does not allow
/// (most control characters) as visible escapes; in attributes also tabs and line breaks.
pub fn xml_escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' if attribute => out.push_str(&format!("&#{};", u32::from(c))),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{fffe}' | '\u{ffff}' => out.extend(c.escape_unicode()),
            c if u32::from(c) < 0x20 => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// The report as JUnit XML: one `testsuite` for the suite file, one `testcase` per case
/// (`classname` the policy and hook), a `failure` with the differences for each failed case.
pub fn junit(report: &Report) -> String {
    let seconds = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let (tests, failures, time) = (
        report.cases.len(),
        report.failed(),
        seconds(report.elapsed()),
    );
    let suite = xml_escape(&report.suite, true);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"tfjob-operator policy test\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{time}\">\n"
    ));
    out.push_str(&format!(
        "  <testsuite name=\"{suite}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time}\">\n"
    ));
    for c in &report.cases {
        let attrs = format!(
            "name=\"{}\" classname=\"{}\" time=\"{}\"",
            xml_escape(&c.name, true),
            xml_escape(&format!("{}.{}", c.policy, c.hook), true),
            seconds(c.elapsed)
        );
        if c.passed() {
            out.push_str(&format!("    <testcase {attrs}/>\n"));
            continue;
        }
        let summary = match c.mismatches.as_slice() {
            [Mismatch::Outcome { actual, .. }] => {
                tfjob_policy_logic::text::elided(actual, MAX_SHOWN)
            }
            ms => format!("{} difference(s) from the expectation", ms.len()),
        };
        out.push_str(&format!(
            "    <testcase {attrs}>\n      <failure message=\"{}\" type=\"mismatch\">{}</failure>\n    </testcase>\n",
            xml_escape(&summary, true),
            xml_escape(&format!("expected (-), actual (+):\n{}", diff_text(&c.mismatches)), false)
        ));
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

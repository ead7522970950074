//! Container logs of the simulated pods, and the options of a `pods/log` request.
//!
//! A real kubelet keeps each container's output in files on the node, the current run's and the
//! previous one's, and answers `kubectl logs` from them. The simulated kubelet writes lines into
//! a [`PodLogs`] instead, held beside the objects in the [`Store`](crate::Store) so that the API
//! server reads what the kubelet writes. Each run of a container (the first and every in-place
//! restart) is a [`RunLog`], bounded to its last [`RUN_LOG_BYTES`] bytes; only the current and
//! the previous run of a container are kept, as on a node, and the whole pod's logs go when the
//! pod is deleted. A follower waits on a `watch` channel of its run, so following costs nothing
//! while the container is quiet.
//!
//! [`LogOptions`] reads the query of a `pods/log` request with the API server's rules and
//! messages, and [`render`] picks and formats the lines (`sinceSeconds`, `tailLines`,
//! `timestamps`, `limitBytes`); both are pure.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;

use crate::ApiError;
use crate::http::query::Query;

/// The most bytes of one run of one container kept in memory; older lines are dropped first.
pub const RUN_LOG_BYTES: usize = 1 << 20;
/// The longest line kept; longer ones are cut (a runtime splits long lines too).
pub const MAX_LINE_BYTES: usize = 16 << 10;

/// One line of output, without its newline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub at: Timestamp,
    pub text: String,
}

#[derive(Debug, Default)]
struct RunState {
    lines: VecDeque<LogLine>,
    /// Sequence number of `lines[0]`: lines dropped for space still count, so a follower that
    /// fell behind knows where it is.
    first: u64,
    bytes: usize,
    closed: bool,
}

/// The output of one run of one container.
#[derive(Debug)]
pub struct RunLog {
    state: Mutex<RunState>,
    /// Bumped on every change; followers wait on it.
    changed: tokio::sync::watch::Sender<u64>,
}

impl RunLog {
    fn new() -> RunLog {
        RunLog {
            state: Mutex::new(RunState::default()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Appends a line, dropping the oldest ones beyond [`RUN_LOG_BYTES`]. Nothing is written
    /// once the run is closed.
    pub fn push(&self, at: Timestamp, text: &str) {
        let text = tfjob_policy_logic::text::prefix(text, MAX_LINE_BYTES);
        {
            let mut s = self.lock();
            if s.closed {
                return;
            }
            s.bytes += text.len() + 1;
            s.lines.push_back(LogLine {
                at,
                text: text.to_owned(),
            });
            while s.bytes > RUN_LOG_BYTES {
                let Some(old) = s.lines.pop_front() else {
                    break;
                };
                s.bytes -= old.text.len() + 1;
                s.first += 1;
            }
        }
        self.notify();
    }

    /// The container ended: followers stop once they have read everything.
    pub fn close(&self) {
        let newly = !std::mem::replace(&mut self.lock().closed, true);
        if newly {
            self.notify();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Every line kept.
    pub fn lines(&self) -> Vec<LogLine> {
        self.lock().lines.iter().cloned().collect()
    }

    /// The lines from sequence number `from` on (or from the oldest kept, if those are gone),
    /// the number to ask from next time, and whether the run is closed.
    pub fn read_from(&self, from: u64) -> (Vec<LogLine>, u64, bool) {
        let s = self.lock();
        let skip = usize::try_from(from.saturating_sub(s.first)).unwrap_or(usize::MAX);
        let lines: Vec<LogLine> = s.lines.iter().skip(skip).cloned().collect();
        let next = s.first + s.lines.len() as u64;
        (lines, next, s.closed)
    }

    /// The sequence number the next line will have.
    pub fn end(&self) -> u64 {
        let s = self.lock();
        s.first + s.lines.len() as u64
    }

    /// A receiver that wakes on every change after this call.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// Which runs of one container are kept: the previous (if any) and the current.
#[derive(Debug, Default)]
struct ContainerLogs {
    previous: Option<Arc<RunLog>>,
    current: Option<Arc<RunLog>>,
}

/// The logs of every simulated container, by pod uid and container name.
#[derive(Debug, Default)]
pub struct PodLogs {
    containers: Mutex<HashMap<(String, String), ContainerLogs>>,
}

impl PodLogs {
    pub fn new() -> PodLogs {
        PodLogs::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), ContainerLogs>> {
        self.containers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new run of a container starts: the current run becomes the previous one (closed, if
    /// the kubelet did not close it), and the one before is dropped.
    pub fn start_run(&self, uid: &str, container: &str) -> Arc<RunLog> {
        let run = Arc::new(RunLog::new());
        let mut all = self.lock();
        let logs = all
            .entry((uid.to_owned(), container.to_owned()))
            .or_default();
        if let Some(old) = logs.current.replace(Arc::clone(&run)) {
            old.close();
            logs.previous = Some(old);
        }
        run
    }

    /// The current run of a container.
    pub fn current(&self, uid: &str, container: &str) -> Option<Arc<RunLog>> {
        let all = self.lock();
        all.get(&(uid.to_owned(), container.to_owned()))?
            .current
            .clone()
    }

    /// The run before the current one.
    pub fn previous(&self, uid: &str, container: &str) -> Option<Arc<RunLog>> {
        let all = self.lock();
        all.get(&(uid.to_owned(), container.to_owned()))?
            .previous
            .clone()
    }

    /// Closes every run of the pod (it ended or is no longer simulated).
    pub fn close_pod(&self, uid: &str) {
        for logs in self.lock().iter().filter(|((u, _), _)| u == uid) {
            if let Some(run) = &logs.1.current {
                run.close();
            }
        }
    }

    /// Closes every current run: no kubelet writes any more.
    pub fn close_all(&self) {
        for logs in self.lock().values() {
            if let Some(run) = &logs.current {
                run.close();
            }
        }
    }

    /// Forgets the pod's logs: it was deleted. Followers still reading end.
    pub fn remove_pod(&self, uid: &str) {
        let mut all = self.lock();
        all.retain(|(u, _), logs| {
            if u != uid {
                return true;
            }
            for run in [&logs.current, &logs.previous].into_iter().flatten() {
                run.close();
            }
            false
        });
    }

    /// Forgets the logs of every pod not in `alive`.
    pub fn retain_pods(&self, alive: impl Fn(&str) -> bool) {
        let mut all = self.lock();
        all.retain(|(u, _), logs| {
            let keep = alive(u);
            if !keep {
                for run in [&logs.current, &logs.previous].into_iter().flatten() {
                    run.close();
                }
            }
            keep
        });
    }

    /// How many containers have logs kept (for tests and accounting).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The options of a `pods/log` request, from its query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

impl LogOptions {
    /// Reads the query parameters. A value that does not parse is a `400` naming the
    /// parameter; one out of range is `422 Invalid` with the API server's validation message
    /// (`pod` names the object in it).
    pub fn from_query(query: &Query, pod: &str) -> Result<LogOptions, ApiError> {
        let since_time = match query.text("sinceTime") {
            None => None,
            Some(v) => Some(v.parse::<Timestamp>().map_err(|_| {
                ApiError::bad_request(format!(
                    "sinceTime: invalid value {v:?}: must be an RFC3339 time"
                ))
            })?),
        };
        let options = LogOptions {
            container: query.text("container").map(str::to_owned),
            follow: query.flag("follow"),
            previous: query.flag("previous"),
            timestamps: query.flag("timestamps"),
            since_seconds: query.integer("sinceSeconds")?,
            since_time,
            tail_lines: query.integer("tailLines")?,
            limit_bytes: query.integer("limitBytes")?,
        };
        let mut problems = Vec::new();
        if let Some(n) = options.tail_lines
            && n < 0
        {
            problems.push(format!(
                "tailLines: Invalid value: {n}: must be greater than or equal to 0"
            ));
        }
        if let Some(n) = options.limit_bytes
            && n < 1
        {
            problems.push(format!(
                "limitBytes: Invalid value: {n}: must be greater than 0"
            ));
        }
        if let Some(n) = options.since_seconds
            && n < 1
        {
            problems.push(format!(
                "sinceSeconds: Invalid value: {n}: must be greater than 0"
            ));
        }
        if options.since_seconds.is_some() && options.since_time.is_some() {
            problems.push(
                "[]: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                    .into(),
            );
        }
        if !problems.is_empty() {
            let detail = if problems.len() == 1 {
                problems.remove(0)
            } else {
                format!("[{}]", problems.join(", "))
            };
            return Err(ApiError::invalid(format!(
                "PodLogOptions \"{pod}\" is invalid: {detail}"
            )));
        }
        Ok(options)
    }

    /// The earliest time of a line to show, if limited.
    pub fn since(&self, now: Timestamp) -> Option<Timestamp> {
        let by_seconds = self.since_seconds.map(|s| {
            now.checked_sub(jiff::SignedDuration::from_secs(s))
                .unwrap_or(Timestamp::MIN)
        });
        by_seconds.or(self.since_time)
    }
}

/// One line as the kubelet serves it: with `timestamps`, its time in RFC 3339 with nanoseconds
/// (trailing zeros trimmed, as Go's `RFC3339Nano`) and a space first.
pub fn format_line(line: &LogLine, timestamps: bool) -> String {
    if timestamps {
        format!("{} {}\n", rfc3339_nano(line.at), line.text)
    } else {
        format!("{}\n", line.text)
    }
}

fn rfc3339_nano(t: Timestamp) -> String {
    // jiff prints as many fractional digits as needed, Go's RFC3339Nano does the same.
    t.to_string()
}

/// The text of the lines `options` select, before following: those since `sinceSeconds` or
/// `sinceTime`, the last `tailLines` of them, cut to `limitBytes`.
pub fn render(lines: &[LogLine], options: &LogOptions, now: Timestamp) -> String {
    let since = options.since(now);
    let picked: Vec<&LogLine> = lines
        .iter()
        .filter(|l| since.is_none_or(|s| l.at >= s))
        .collect();
    let tail = options
        .tail_lines
        .map_or(picked.len(), |n| usize::try_from(n).unwrap_or(usize::MAX))
        .min(picked.len());
    let mut out = String::new();
    for line in &picked[picked.len() - tail..] {
        out.push_str(&format_line(line, options.timestamps));
    }
    if let Some(limit) = options.limit_bytes {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        out.truncate(tfjob_policy_logic::text::prefix(&out, limit).len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Query {
        let raw: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Query::parse(Some(&raw.join("&")))
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn lines(n: i64) -> Vec<LogLine> {
        (0..n)
            .map(|i| LogLine {
                at: at(i),
                text: format!("line {i}"),
            })
            .collect()
    }

    #[test]
    fn options_parse_with_the_api_servers_rules() {
        let o = LogOptions::from_query(
            &query(&[
                ("container", "tensorflow"),
                ("follow", "true"),
                ("tailLines", "5"),
                ("timestamps", "1"),
                ("previous", "false"),
                ("limitBytes", "100"),
                ("sinceSeconds", "60"),
            ]),
            "p",
        )
        .unwrap();
        assert_eq!(
            o,
            LogOptions {
                container: Some("tensorflow".into()),
                follow: true,
                previous: false,
                timestamps: true,
                since_seconds: Some(60),
                since_time: None,
                tail_lines: Some(5),
                limit_bytes: Some(100),
            }
        );
        assert_eq!(
            LogOptions::from_query(&Query::default(), "p").unwrap(),
            LogOptions::default()
        );
    }

    #[test]
    fn hostile_values_name_their_field() {
        for (key, value, code) in [
            ("tailLines", "ten", 400),
            ("tailLines", "99999999999999999999999", 400),
            ("sinceSeconds", "1e3", 400),
            ("limitBytes", "-", 400),
            ("sinceTime", "yesterday", 400),
            ("tailLines", "-1", 422),
            ("limitBytes", "0", 422),
            ("sinceSeconds", "-5", 422),
        ] {
            let e = LogOptions::from_query(&query(&[(key, value)]), "p").unwrap_err();
            assert_eq!(e.code, code, "{key}={value}: {e}");
            assert!(e.message.contains(key), "{key}={value}: {e}");
        }
        // Booleans are read as the API server's parameter codec reads them: only `0` and
        // `false` (any case) are false.
        assert!(
            LogOptions::from_query(&query(&[("follow", "yes")]), "p")
                .unwrap()
                .follow
        );
        assert!(
            !LogOptions::from_query(&query(&[("follow", "FALSE")]), "p")
                .unwrap()
                .follow
        );
        let e = LogOptions::from_query(&query(&[("tailLines", "-1")]), "p").unwrap_err();
        assert_eq!(
            e.message,
            "PodLogOptions \"p\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
    }

    #[test]
    fn tail_since_and_limit_select_lines() {
        let all = lines(10);
        let opts = |tail: Option<i64>| LogOptions {
            tail_lines: tail,
            ..LogOptions::default()
        };
        assert_eq!(render(&all, &opts(Some(2)), at(10)), "line 8\nline 9\n");
        assert_eq!(render(&all, &opts(Some(0)), at(10)), "");
        // A tail longer than the log (even absurdly so) is the whole log.
        assert_eq!(
            render(&all, &opts(Some(i64::MAX)), at(10)).lines().count(),
            10
        );
        let since = LogOptions {
            since_seconds: Some(3),
            ..LogOptions::default()
        };
        assert_eq!(render(&all, &since, at(10)), "line 7\nline 8\nline 9\n");
        let huge = LogOptions {
            since_seconds: Some(i64::MAX),
            ..LogOptions::default()
        };
        assert_eq!(render(&all, &huge, at(10)).lines().count(), 10);
        let limited = LogOptions {
            limit_bytes: Some(9),
            ..LogOptions::default()
        };
        assert_eq!(render(&all, &limited, at(10)), "line 0\nli");
    }

    #[test]
    fn timestamps_are_rfc3339_nano() {
        let line = LogLine {
            at: Timestamp::new(1_700_000_000, 120_000_000).unwrap(),
            text: "hello".into(),
        };
        assert_eq!(format_line(&line, true), "2023-11-14T22:13:20.12Z hello\n");
        let whole = LogLine {
            at: Timestamp::from_second(1_700_000_000).unwrap(),
            text: "x".into(),
        };
        assert_eq!(format_line(&whole, true), "2023-11-14T22:13:20Z x\n");
        assert_eq!(format_line(&whole, false), "x\n");
    }

    #[test]
    fn a_run_keeps_its_last_megabyte() {
        let run = RunLog::new();
        let big = "x".repeat(1000);
        for _ in 0..2000 {
            run.push(at(0), &big);
        }
        let kept = run.lines();
        assert!(kept.len() * 1001 <= RUN_LOG_BYTES, "{}", kept.len());
        assert_eq!(kept.len(), RUN_LOG_BYTES / 1001);
        // Sequence numbers keep counting the dropped lines.
        assert_eq!(run.end(), 2000);
        let (rest, next, closed) = run.read_from(1998);
        assert_eq!((rest.len(), next, closed), (2, 2000, false));
        let (from_gone, _, _) = run.read_from(0);
        assert_eq!(from_gone.len(), kept.len());
        // An overlong line is cut on a character boundary.
        run.push(at(0), &"é".repeat(MAX_LINE_BYTES));
        assert_eq!(run.lines().last().unwrap().text.len(), MAX_LINE_BYTES);
    }

    #[test]
    fn runs_rotate_and_pods_are_forgotten() {
        let logs = PodLogs::new();
        let first = logs.start_run("u1", "c");
        first.push(at(0), "first");
        assert!(logs.previous("u1", "c").is_none());
        let second = logs.start_run("u1", "c");
        second.push(at(1), "second");
        assert!(first.is_closed());
        assert_eq!(logs.previous("u1", "c").unwrap().lines()[0].text, "first");
        assert_eq!(logs.current("u1", "c").unwrap().lines()[0].text, "second");
        logs.start_run("u1", "c");
        assert_eq!(logs.previous("u1", "c").unwrap().lines()[0].text, "second");
        let other = logs.start_run("u2", "c");
        logs.close_all();
        assert!(other.is_closed());
        let other = logs.start_run("u2", "c");
        logs.close_pod("u1");
        assert!(!other.is_closed());
        assert!(logs.current("u1", "c").unwrap().is_closed());
        logs.remove_pod("u1");
        assert!(logs.current("u1", "c").is_none());
        assert_eq!(logs.len(), 1);
        logs.retain_pods(|u| u != "u2");
        assert!(logs.is_empty());
        // A closed run takes no more lines.
        second.push(at(2), "late");
        assert_eq!(second.lines().len(), 1);
    }

    #[tokio::test]
    async fn followers_wake_on_new_lines_and_on_close() {
        let run = Arc::new(RunLog::new());
        let mut rx = run.subscribe();
        let writer = Arc::clone(&run);
        tokio::spawn(async move {
            writer.push(at(0), "a");
            writer.close();
        });
        let mut seen = Vec::new();
        let mut from = 0;
        loop {
            let (lines, next, closed) = run.read_from(from);
            seen.extend(lines.into_iter().map(|l| l.text));
            from = next;
            if closed {
                break;
            }
            rx.changed().await.unwrap();
        }
        assert_eq!(seen, ["a"]);
    }
}

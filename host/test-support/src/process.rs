//! Running a child process with a time limit, its output collected without ever blocking it.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runs `cmd` with `stdin` as its standard input (`None`: nothing to read) and collects its
/// output; kills it and fails after `timeout`.
pub fn run(mut cmd: Command, stdin: Option<&str>, timeout: Duration) -> Output {
    let input = if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    cmd.stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} does not start: {e}"));
    // Written and read from other threads so that full pipes never block the child.
    let writer = stdin.map(|text| {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        let text = text.to_owned();
        std::thread::spawn(move || {
            // A child that exits without reading (usage errors) closes the pipe: not a failure
            // here.
            let _ = pipe.write_all(text.as_bytes());
        })
    });
    let out_reader = read_all(child.stdout.take().expect("stdout is piped"));
    let err_reader = read_all(child.stderr.take().expect("stderr is piped"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{program} did not finish within {timeout:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(writer) = writer {
        writer.join().expect("stdin writer finishes");
    }
    Output {
        status,
        stdout: out_reader
            .join()
            .expect("stdout reader finishes")
            .expect("stdout is readable"),
        stderr: err_reader
            .join()
            .expect("stderr reader finishes")
            .expect("stderr is readable"),
    }
}

/// Reads `pipe` to its end on a thread of its own.
fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<std::io::Result<Vec<u8>>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        pipe.read_to_end(&mut buf).map(|_| buf)
    })
}

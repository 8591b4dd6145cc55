//! Tests of what a fresh process does with its environment (the bad-input tests of
//! gex-boot and gex): the test binary runs one of its own `#[ignore]`d tests in a
//! child process with a cleared environment, [`VAR`] naming what the child is to do;
//! the child prints its answer as a line `RESULT …`.

use std::process::{Command, Stdio};

/// The variable that tells the child test what to do (its absence: do nothing).
pub const VAR: &str = "BAD_INPUT_CHILD";

/// Runs this test binary's ignored test `test` in a child process with only `env`
/// and [`VAR`]` = what` set; asserts it succeeded and returns its standard output.
pub fn run(test: &str, what: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--ignored", "--nocapture"])
        .env_clear()
        .env(VAR, what)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {what} {env:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The `RESULT` lines of a child's output, without the prefix.
///
/// A `RESULT` line may follow another process's partial line: when a child launches
/// ranks that share its standard output, one rank's `RESULT ...` line (one write)
/// can land between the two writes of another rank's test-harness line (seen in CI:
/// `test result: ok. ... filtered outRESULT ok smp 1/2`). So the marker is looked
/// for anywhere in a line, and the rest of the line is the result.
pub fn results(stdout: &str) -> impl Iterator<Item = &str> {
    stdout
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|i| &l[i + "RESULT ".len()..]))
}

/// The first `RESULT` line of [`run`]`(test, what, env)`; panics if there is none.
pub fn result(test: &str, what: &str, env: &[(&str, &str)]) -> String {
    let stdout = run(test, what, env);
    results(&stdout)
        .next()
        .unwrap_or_else(|| panic!("child {what} {env:?} printed no result: {stdout}"))
        .to_string()
}

/// Asserts that the child's [`result`] starts with `want` and contains `mentions`.
pub fn expect(test: &str, what: &str, env: &[(&str, &str)], want: &str, mentions: &str) {
    let got = result(test, what, env);
    assert!(
        got.starts_with(want) && got.contains(mentions),
        "{what} with {env:?}: expected {want:?} mentioning {mentions:?}, got {got:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::results;

    /// A `RESULT` line is found at the start of a line and after another process's
    /// partial line (the interleaving CI met), and lines without one are skipped.
    #[test]
    fn results_are_found_after_an_interleaved_partial_line() {
        let out = "running 1 test\nRESULT ok smp 0/2\ntest child_entry ... ok\n\
                   test result: ok. 1 passed; 4 filtered outRESULT ok smp 1/2\n\
                   ; finished in 0.00s\n";
        let got: Vec<&str> = results(out).collect();
        assert_eq!(got, ["ok smp 0/2", "ok smp 1/2"]);
    }
}

//! The mutation fuzzer: corpus, mutations, outcome feedback, panic capture,
//! minimisation and the hang watchdog.

use crate::Target;
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

/// How to run a target.
#[derive(Clone, Debug)]
pub struct Options {
    /// Stop after this long.
    pub time: Duration,
    /// Stop after this many executions (whichever comes first).
    pub max_execs: Option<u64>,
    /// Seed of the random choices (a run is reproducible from it).
    pub seed: u64,
    /// An execution that takes longer is a hang: the input is written out and the
    /// process exits with status 3.
    pub hang: Duration,
    /// Where failing inputs are written (`<out>/<target>/crash-<hash>.bin`).
    pub out: PathBuf,
    /// Saved inputs (`<corpus>/<target>/*`) added to the seeds, if given.
    pub corpus: Option<PathBuf>,
    /// Longest input the mutator makes.
    pub max_len: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            time: Duration::from_secs(10),
            max_execs: None,
            seed: 1,
            hang: Duration::from_secs(10),
            out: PathBuf::from("target/gex-fuzz"),
            corpus: Some(default_corpus()),
            max_len: 4096,
        }
    }
}

/// `benches/gex-fuzz/corpus`.
fn default_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// A property that failed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The (minimised) input.
    pub input: Vec<u8>,
    /// The panic message and its location.
    pub message: String,
    /// Where the input was written, if it could be.
    pub path: Option<PathBuf>,
}

/// What a run of one target did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The target's name.
    pub target: &'static str,
    /// Inputs executed.
    pub execs: u64,
    /// How long it ran.
    pub elapsed: Duration,
    /// Inputs in the corpus at the end (seeds and kept mutants).
    pub corpus: usize,
    /// Distinct outcome classes seen.
    pub outcomes: usize,
    /// The first property that failed, if any.
    pub failure: Option<Failure>,
}

/// The outcome class of a result description: a hash of `what` without its quoted
/// parts and without the words that contain a digit, so that errors differing only in
/// the numbers or the text they quote fall into one class.
pub fn outcome(what: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut quoted = false;
    let mut word = String::new();
    let mut flush = |w: &mut String| {
        if !w.chars().any(|c| c.is_ascii_digit()) {
            w.hash(&mut h);
        }
        w.clear();
    };
    for c in what.chars() {
        if c == '"' {
            quoted = !quoted;
            continue;
        }
        if quoted {
            continue;
        }
        if c.is_whitespace() {
            flush(&mut word);
        } else {
            word.push(c);
        }
    }
    flush(&mut word);
    h.finish()
}

/// Small, fast, reproducible random numbers (SplitMix64).
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const INTERESTING_8: [u8; 16] = [
    0, 1, 0x7f, 0x80, 0xff, b'\n', b' ', b'=', b'.', b',', b'(', b')', b'"', b'#', b'[', b'\\',
];
const INTERESTING_32: [u32; 16] = [
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    17,
    64,
    4096,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
];
const INTERESTING_64: [u64; 8] = [
    0,
    1,
    u64::MAX,
    u64::MAX - 1,
    1 << 63,
    (1 << 63) - 1,
    1 << 32,
    4096,
];

/// Applies one random mutation to `d`; `other` is another corpus entry to splice
/// from.
fn mutate_once(rng: &mut Rng, d: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let len = d.len();
    let op = rng.below(16);
    match op {
        // Operations that need at least one byte fall through to an insertion.
        0 if len > 0 => {
            let i = rng.below(len);
            d[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            d[i] = rng.next() as u8;
        }
        2 if len > 0 => {
            let i = rng.below(len);
            d[i] = INTERESTING_8[rng.below(INTERESTING_8.len())];
        }
        3 if len >= 2 => {
            let i = rng.below(len - 1);
            let v = INTERESTING_32[rng.below(INTERESTING_32.len())] as u16;
            d[i..i + 2].copy_from_slice(&v.to_le_bytes());
        }
        4 if len >= 4 => {
            let i = rng.below(len - 3);
            let mut v = INTERESTING_32[rng.below(INTERESTING_32.len())];
            if rng.chance(4) {
                // A length near the input's own.
                v = (len as u32)
                    .wrapping_add(rng.below(5) as u32)
                    .wrapping_sub(2);
            }
            let b = if rng.chance(2) {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            d[i..i + 4].copy_from_slice(&b);
        }
        5 if len >= 8 => {
            let i = rng.below(len - 7);
            let v = INTERESTING_64[rng.below(INTERESTING_64.len())];
            d[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        8 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(32));
            d.drain(i..i + n);
        }
        9 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(64));
            let chunk = d[i..i + n].to_vec();
            let at = rng.below(len + 1);
            d.splice(at..at, chunk);
        }
        10 if !other.is_empty() => {
            let at = rng.below(len + 1);
            let from = rng.below(other.len());
            d.truncate(at);
            d.extend_from_slice(&other[from..]);
        }
        11 if len > 0 => d.truncate(rng.below(len)),
        12 if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(64));
            let at = rng.below(len + 1);
            d.splice(at..at, other[from..from + n].iter().copied());
        }
        13 if len > 0 => {
            let i = rng.below(len);
            d[i] = d[i].wrapping_add(rng.below(33) as u8).wrapping_sub(16);
        }
        14 if len >= 2 => {
            let (i, j) = (rng.below(len), rng.below(len));
            d.swap(i, j);
        }
        15 => {
            // A decimal number (text formats).
            let n = match rng.below(4) {
                0 => rng.below(10) as u64,
                1 => rng.below(70_000) as u64,
                2 => u64::from(INTERESTING_32[rng.below(INTERESTING_32.len())]),
                _ => INTERESTING_64[rng.below(INTERESTING_64.len())],
            };
            let at = rng.below(len + 1);
            d.splice(at..at, n.to_string().into_bytes());
        }
        7 => {
            let at = rng.below(len + 1);
            let most = if rng.chance(8) { 256 } else { 8 };
            let n = 1 + rng.below(most);
            let b = INTERESTING_8[rng.below(INTERESTING_8.len())];
            d.splice(at..at, std::iter::repeat_n(b, n));
        }
        _ => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            d.splice(at..at, bytes);
        }
    }
    d.truncate(max_len);
}

fn mutate(rng: &mut Rng, base: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut d = base.to_vec();
    let n = 1 << rng.below(4);
    for _ in 0..n {
        mutate_once(rng, &mut d, other, max_len);
    }
    d
}

thread_local! {
    /// Set while this thread runs fuzz inputs: panics are recorded, not printed.
    static QUIET: RefCell<bool> = const { RefCell::new(false) };
    /// The last panic of this thread (message and location).
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that records the panics of fuzzing threads instead of
/// printing them, and leaves other threads to the default hook.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| *q.borrow()) {
                let msg = match info.payload().downcast_ref::<&str>() {
                    Some(s) => (*s).to_string(),
                    None => match info.payload().downcast_ref::<String>() {
                        Some(s) => s.clone(),
                        None => "(non-string panic payload)".to_string(),
                    },
                };
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg} (at {at})")));
            } else {
                default(info);
            }
        }));
    });
}

/// Runs `t` on `input`: the outcome class, or the panic message.
fn exec(t: &Target, input: &[u8]) -> Result<u64, String> {
    LAST_PANIC.with(|p| *p.borrow_mut() = None);
    match panic::catch_unwind(AssertUnwindSafe(|| (t.run)(input))) {
        Ok(o) => Ok(o),
        Err(_) => Err(LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "panic".to_string())),
    }
}

/// The location part of a panic message, which identifies the failure during
/// minimisation.
fn signature(msg: &str) -> &str {
    msg.rsplit_once(" (at ").map_or(msg, |(_, at)| at)
}

/// Runs `t` on one input, printing nothing on a panic.
///
/// # Errors
/// The panic message (and location) if a property failed.
pub fn replay(t: &Target, input: &[u8]) -> Result<u64, String> {
    install_hook();
    QUIET.with(|q| *q.borrow_mut() = true);
    let r = exec(t, input);
    QUIET.with(|q| *q.borrow_mut() = false);
    r
}

/// Shrinks `input` while it fails with the same signature (bounded work).
fn minimise(t: &Target, input: &[u8], sig: &str, watch: &Watch) -> (Vec<u8>, String) {
    let mut best = input.to_vec();
    let mut msg = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let budget = std::cell::Cell::new(20_000u32);
    let live = || budget.get() > 0 && Instant::now() < deadline;
    let fails = |cand: &[u8], msg: &mut String| -> bool {
        budget.set(budget.get().saturating_sub(1));
        watch.start(cand);
        let r = exec(t, cand);
        watch.stop();
        match r {
            Err(m) if signature(&m) == sig => {
                *msg = m;
                true
            }
            _ => false,
        }
    };
    let mut chunk = best.len().max(1).next_power_of_two();
    while chunk >= 1 && live() {
        let mut i = 0;
        while i < best.len() && live() {
            let end = (i + chunk).min(best.len());
            let mut cand = best[..i].to_vec();
            cand.extend_from_slice(&best[end..]);
            if fails(&cand, &mut msg) {
                best = cand;
            } else {
                i += chunk;
            }
        }
        chunk /= 2;
    }
    for i in 0..best.len() {
        if !live() {
            break;
        }
        for v in [0u8, b'0', b'a'] {
            if best[i] == v {
                break;
            }
            let mut cand = best.clone();
            cand[i] = v;
            if fails(&cand, &mut msg) {
                best = cand;
                break;
            }
        }
    }
    if msg.is_empty() {
        msg = exec(t, &best).err().unwrap_or_default();
    }
    (best, msg)
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn write_input(out: &Path, target: &str, kind: &str, input: &[u8]) -> Option<PathBuf> {
    let dir = out.join(target);
    std::fs::create_dir_all(&dir).ok()?;
    let p = dir.join(format!("{kind}-{:016x}.bin", fnv(input)));
    std::fs::write(&p, input).ok()?;
    Some(p)
}

/// Shows an input for a report: its bytes in hex (at most 512) and as text.
pub fn show(input: &[u8]) -> String {
    let hex: Vec<String> = input.iter().take(512).map(|b| format!("{b:02x}")).collect();
    format!(
        "{} bytes: {}{}\n    as text: {:?}",
        input.len(),
        hex.join(""),
        if input.len() > 512 { "…" } else { "" },
        String::from_utf8_lossy(&input[..input.len().min(512)])
    )
}

/// The hang watchdog's view of one fuzzing thread.
struct Watch {
    /// Milliseconds since `base` at which the running execution started, or 0.
    started: AtomicU64,
    input: Mutex<Vec<u8>>,
    base: Instant,
    done: AtomicBool,
}

impl Watch {
    fn start(&self, input: &[u8]) {
        if let Ok(mut g) = self.input.lock() {
            g.clear();
            g.extend_from_slice(input);
        }
        let ms = self.base.elapsed().as_millis() as u64 + 1;
        self.started.store(ms, Ordering::Release);
    }
    fn stop(&self) {
        self.started.store(0, Ordering::Release);
    }
}

/// Starts a thread that ends the process if one execution of `target` takes longer
/// than `hang`, after writing the input out.
fn watchdog(target: &'static str, opts: &Options) -> Arc<Watch> {
    let w = Arc::new(Watch {
        started: AtomicU64::new(0),
        input: Mutex::new(Vec::new()),
        base: Instant::now(),
        done: AtomicBool::new(false),
    });
    let ww = w.clone();
    let (hang, out) = (opts.hang, opts.out.clone());
    std::thread::Builder::new()
        .name(format!("watchdog-{target}"))
        .spawn(move || {
            while !ww.done.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(50));
                let s = ww.started.load(Ordering::Acquire);
                if s == 0 {
                    continue;
                }
                let now = ww.base.elapsed().as_millis() as u64 + 1;
                if now.saturating_sub(s) > hang.as_millis() as u64 {
                    let input = ww.input.lock().map(|g| g.clone()).unwrap_or_default();
                    let path = write_input(&out, target, "hang", &input);
                    eprintln!(
                        "gex-fuzz: {target}: HANG: one execution took more than {hang:?}\n    \
                         input {}\n    saved as {}\n    replay: gex-fuzz replay {target} <file>",
                        show(&input),
                        path.map_or("(not saved)".into(), |p| p.display().to_string()),
                    );
                    std::process::exit(3);
                }
            }
        })
        .expect("watchdog thread");
    w
}

fn load_corpus(dir: &Path, target: &str) -> Vec<Vec<u8>> {
    let Ok(rd) = std::fs::read_dir(dir.join(target)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

/// Inputs saved for `target` in the corpus directory (empty if none).
pub fn saved_inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = default_corpus().join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect()
}

/// Fuzzes `t` within `opts`' budget. Stops at the first failure, which it minimises
/// and writes out.
pub fn fuzz(t: &Target, opts: &Options) -> Report {
    install_hook();
    QUIET.with(|q| *q.borrow_mut() = true);
    let watch = watchdog(t.name, opts);
    let mut rng = Rng(opts.seed ^ fnv(t.name.as_bytes()));
    let mut corpus: Vec<Vec<u8>> = (t.seeds)();
    if let Some(dir) = &opts.corpus {
        corpus.extend(load_corpus(dir, t.name));
    }
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    let mut seen: HashSet<u64> = HashSet::new();
    let start = Instant::now();
    let mut execs = 0u64;
    let mut failure = None;
    let mut queue: Vec<Vec<u8>> = corpus.clone();
    const MAX_CORPUS: usize = 4096;
    loop {
        if opts.max_execs.is_some_and(|m| execs >= m) {
            break;
        }
        // Check the clock every 64 executions.
        if execs % 64 == 0 && start.elapsed() >= opts.time {
            break;
        }
        // Seeds and saved inputs first, as they are; then mutants.
        let input = match queue.pop() {
            Some(q) => q,
            None if rng.chance(32) => {
                let most = if rng.chance(4) { 1024 } else { 64 };
                let n = rng.below(most);
                (0..n).map(|_| rng.next() as u8).collect()
            }
            None => {
                let base = &corpus[rng.below(corpus.len())];
                let other = &corpus[rng.below(corpus.len())];
                mutate(&mut rng, base, other, opts.max_len.max(base.len()))
            }
        };
        watch.start(&input);
        let r = exec(t, &input);
        watch.stop();
        execs += 1;
        match r {
            Ok(o) => {
                if seen.insert(o) && corpus.len() < MAX_CORPUS {
                    corpus.push(input);
                }
            }
            Err(msg) => {
                let sig = signature(&msg).to_string();
                let (min, min_msg) = minimise(t, &input, &sig, &watch);
                let path = write_input(&opts.out, t.name, "crash", &min);
                failure = Some(Failure {
                    input: min,
                    message: if min_msg.is_empty() { msg } else { min_msg },
                    path,
                });
                break;
            }
        }
    }
    watch.done.store(true, Ordering::Release);
    QUIET.with(|q| *q.borrow_mut() = false);
    Report {
        target: t.name,
        execs,
        elapsed: start.elapsed(),
        corpus: corpus.len(),
        outcomes: seen.len(),
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boom(d: &[u8]) -> u64 {
        // Fails for inputs containing the bytes "gex" anywhere.
        if d.windows(3).any(|w| w == b"gex") {
            panic!("found gex");
        }
        outcome(if d.is_empty() { "empty" } else { "some" })
    }

    const BOOM: Target = Target {
        name: "self-test",
        decoder: "none",
        checks: "a planted bug",
        seeds: || vec![b"gez and more bytes".to_vec()],
        run: boom,
    };

    #[test]
    fn finds_and_minimises_a_planted_bug() {
        let dir = std::env::temp_dir().join(format!("gex-fuzz-selftest-{}", std::process::id()));
        let opts = Options {
            time: Duration::from_secs(60),
            max_execs: Some(2_000_000),
            out: dir.clone(),
            corpus: None,
            ..Options::default()
        };
        let r = fuzz(&BOOM, &opts);
        let f = r.failure.expect("the planted bug is found");
        assert_eq!(f.input, b"gex", "minimised to the three bytes");
        assert!(f.message.contains("found gex"), "{}", f.message);
        let saved = std::fs::read(f.path.expect("written out")).unwrap();
        assert_eq!(saved, b"gex");
        assert!(replay(&BOOM, &saved).is_err());
        assert!(replay(&BOOM, b"gez").is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn outcomes_ignore_numbers() {
        assert_eq!(outcome("frame of 12 bytes"), outcome("frame of 4096 bytes"));
        assert_eq!(
            outcome("user word 0x00ab and \"x y\""),
            outcome("user word 0x0 and \"\"")
        );
        assert_ne!(outcome("frame of 12 bytes"), outcome("blob of 12 bytes"));
    }

    #[test]
    fn mutations_stay_within_the_length_limit() {
        let mut rng = Rng(7);
        let mut d = vec![1u8; 10];
        for _ in 0..10_000 {
            d = mutate(&mut rng, &d, b"other input", 100);
            assert!(d.len() <= 100);
        }
    }
}
